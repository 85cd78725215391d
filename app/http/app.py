"""The chat API and web page: a FastAPI app, one per uvicorn worker (``create_app`` is the factory).

Each worker's lifespan opens ONE memory backend (pool, saver, store), compiles the
graph once with them, and starts the registry of the turns it runs. Workers share
nothing but Postgres (and the Prometheus multiprocess directory).

Environment:
- ``DATABASE_URL``: the Postgres to use (``memory-agent serve`` sets it for its workers);
- ``MEMORY_AGENT_AUTH=off``: no API keys, every caller is user ``local`` (development only);
- ``MEMORY_AGENT_MODEL``: the chat model of every turn (default auto → offline without a key);
- ``MEMORY_AGENT_POOL_SIZE``: connections per worker, all opened at start (default 20);
- ``MEMORY_AGENT_CORS_ORIGINS``: origins whose web pages may call the API (app.http.cross_origin);
- ``MEMORY_AGENT_MODEL_PLUGINS``: comma-separated ``module:function`` called at start, to
  register extra chat models with ``llm.chat_model.register_model`` (embedders, tests);
- ``PROMETHEUS_MULTIPROC_DIR``: set by ``serve`` so /metrics adds up all workers.
"""

from __future__ import annotations

import importlib
import logging
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.http.api_docs import install_api_docs
from app.http.query_text import QueryText
from app.http.body_limit import MAX_BODY_BYTES, BodyLimit
from app.http.auth import auth_enabled
from app.http.cross_origin import allow_cross_origin
from app.http.errors import install_error_handlers
from app.http.routes_chats import router as chats_router
from app.http.routes_imports import add_import_schemas, router as imports_router
from app.http.routes_memory import router as memory_router
from app.http.routes_system import WEB_DIR, router as system_router
from app.http.serve import configured_pool_size
from app.http.services import Services
from app.runs.active_runs import ActiveRuns
from graph.assembly import compile_graph
from llm.chat_model import load_chat_model
from core.context import Context
from core.dates import prepare_date_parsing
from memory.backend import freeze_start_up, open_memory
from storage.fenced_saver import FencedPostgresSaver

log = logging.getLogger(__name__)

PLUGINS_ENV = "MEMORY_AGENT_MODEL_PLUGINS"


def load_model_plugins() -> None:
    for spec in filter(None, (s.strip() for s in os.environ.get(PLUGINS_ENV, "").split(","))):
        module, _, function = spec.partition(":")
        getattr(importlib.import_module(module), function or "register")()
        log.info("model plugin %s loaded", spec)


@asynccontextmanager
async def lifespan(app: FastAPI):
    load_model_plugins()
    pool_size = configured_pool_size()
    # The whole pool opened now: grown on demand, a burst of turns after a start (or an idle spell)
    # waited for connections being made one at a time, their backends' caches cold.
    async with open_memory(max_pool_size=pool_size, min_pool_size=pool_size) as backend:
        await warm_up(backend)
        # The backend's saver class with a fence against late writes of stopped runs (storage.fenced_saver).
        graph = compile_graph(FencedPostgresSaver(backend.pool), backend.store)
        # What the warm-up and the graph built lives as long as the worker: no full collection walks it.
        freeze_start_up(again=True)
        runs = ActiveRuns(graph, backend.pool)
        runs.start_reaper()  # dead workers' runs are finished by the live ones
        app.state.services = Services(
            backend=backend,
            graph=graph,
            runs=runs,
            auth_enabled=auth_enabled(),
            max_message_chars=Context().max_message_chars,
        )
        try:
            yield
        finally:
            await runs.close()


async def warm_up(backend) -> None:
    """A worker's one-off costs, paid before it takes a request rather than inside the event loop
    its first turns share: the encoder's weights, the default chat model (its client and imports)
    and dateparser's first parse (~0.5 s, memory extraction's dates)."""
    await backend.embeddings.embeddings.aembed_query("warm-up")
    try:
        load_chat_model(None)
    except Exception as exc:  # a model that cannot be made (a missing key): each turn says why, as before
        log.warning("the chat model is not ready: %s", exc)
    prepare_date_parsing()


class WorkerHeaders:
    """ASGI middleware: every response says which worker answered (``X-Worker-Pid``)."""

    def __init__(self, app) -> None:
        self.app = app
        self.pid = str(os.getpid()).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        async def send_with_pid(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-worker-pid", self.pid)]
            await send(message)

        return await self.app(scope, receive, send_with_pid)


def create_app() -> FastAPI:
    app = FastAPI(
        title="memory-agent chat API",
        version="1.0",
        description="Chats with an agent whose memory lives in Postgres. Authenticate with `Authorization: Bearer <key>` "
        "(or `X-API-Key`); keys come from `memory-agent keys create --user <you>`. Errors are "
        '`{"error": {"code", "message"}}`.',
        lifespan=lifespan,
        docs_url=None,  # /docs is served from local files (app.http.api_docs); ReDoc would need a CDN
        redoc_url=None,
    )
    install_api_docs(app)
    install_error_handlers(app)
    # Inside WorkerHeaders (a 413 names its worker too), outside the rest: before authentication and parsing.
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(QueryText)
    app.add_middleware(WorkerHeaders)
    allow_cross_origin(app)  # outermost: a preflight is answered before size, auth or routes look at it
    app.include_router(imports_router)  # (before /chats/{chat_id}'s routes, though none is a POST of that shape)
    app.include_router(chats_router)
    app.include_router(memory_router)
    app.include_router(system_router)

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    default_openapi = app.openapi
    app.openapi = lambda: app.openapi_schema or add_import_schemas(default_openapi())  # the import route reads its own body
    return app
