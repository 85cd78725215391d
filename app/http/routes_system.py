"""The system routes: the personas, health, Prometheus metrics, and the web page itself."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psycopg
from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, JSONResponse, Response
from psycopg_pool import PoolTimeout

import prompts
from app.http.schemas import Health, PersonaList, PersonaOut
from app.http.services import Services, get_services

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent / "web"

router = APIRouter()


# The page holds the user's key: only its own scripts run (a script that slipped into a reply
# cannot), nothing is fetched from elsewhere, and no other site may frame it (clickjacking).
# img-src allows data: for the inline favicon.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'; img-src 'self' data:"
)
PAGE_HEADERS = {"Content-Security-Policy": PAGE_CSP, "X-Frame-Options": "DENY"}


def database_problem(exc: BaseException) -> str:
    """/healthz's description of a failed database check, without the exception's own text."""
    if isinstance(exc, PoolTimeout):
        return "no database connection within 5 s: the database is down or every connection is busy"
    if isinstance(exc, psycopg.OperationalError):
        return "the database refused or dropped the connection"
    return f"the database check failed ({type(exc).__name__}); see the server log"


def metrics_payload() -> bytes:
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


@router.get("/personas", response_model=PersonaList, tags=["system"])
async def list_personas():
    return PersonaList(personas=[PersonaOut(name=p.name, title=p.title, description=p.description) for p in prompts.personas().values()])

@router.get("/healthz", response_model=Health, tags=["system"], responses={503: {"model": Health}})
async def health(services: Services = Depends(get_services)):
    try:
        async with services.backend.pool.connection(timeout=5) as conn:
            await conn.execute("SELECT 1")
    except Exception as exc:
        # What is wrong, in words; the exception text (hosts, paths, users) stays in the server log.
        log.warning("health check: the database is unavailable: %r", exc)
        body = Health(status="unavailable", database=database_problem(exc), worker_pid=os.getpid())
        return JSONResponse(body.model_dump(), status_code=503)
    return Health(status="ok", database="ok", worker_pid=os.getpid())

@router.get("/metrics", tags=["system"], response_class=Response)
async def metrics():
    """Prometheus metrics of all workers: turns, node latency, tokens in/out, memories written, failures."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(metrics_payload(), media_type=CONTENT_TYPE_LATEST)

@router.get("/", include_in_schema=False)
async def index():
    return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache", **PAGE_HEADERS})
