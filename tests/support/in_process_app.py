"""The HTTP app in the test's process, served by the test's backend: requests through httpx's ASGI
transport, so a test can make an interleaving deterministic (monkeypatch a step, run another
request at that point)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import httpx

from app.http.app import create_app
from app.http.services import Services
from app.runs.active_runs import ActiveRuns
from core.context import Context
from graph.assembly import compile_graph
from storage.fenced_saver import FencedPostgresSaver


@asynccontextmanager
async def in_process_app(backend) -> AsyncIterator:
    """The app with its services (graph, runs) on ``backend``; its lifespan is not run."""
    graph = compile_graph(FencedPostgresSaver(backend.pool), backend.store)
    runs = ActiveRuns(graph, backend.pool)
    app = create_app()
    app.state.services = Services(backend=backend, graph=graph, runs=runs, auth_enabled=True, max_message_chars=Context().max_message_chars)
    try:
        yield app
    finally:
        await runs.close()


def client_of(app, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver", headers={"Authorization": f"Bearer {key}"}, timeout=60)
