"""Custom stream events of the memory nodes, and the config that keeps their model calls quiet."""

from __future__ import annotations

from langgraph.config import get_stream_writer

# Memory calls are not part of the reply: keep their tokens out of the "messages" stream.
NOSTREAM = {"tags": ["nostream"]}


def emit(event: dict) -> None:
    """Send ``event`` to the run's "custom" stream (``{"event": "memory" | "summary", ...}``)."""
    try:
        writer = get_stream_writer()
    except Exception:  # outside a run there is no writer
        return
    writer(event)
