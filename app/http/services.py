"""What the routes of one server process share: opened once per worker by the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from app.runs.active_runs import ActiveRuns
from memory.backend import MemoryBackend


@dataclass
class Services:
    backend: MemoryBackend
    graph: object  # the compiled graph, with the backend's saver and store
    runs: ActiveRuns
    auth_enabled: bool
    max_message_chars: int


def get_services(request: Request) -> Services:
    return request.app.state.services
