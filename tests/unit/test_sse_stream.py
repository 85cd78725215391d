"""The SSE stream (app.http.sse): the events a run has already queued go out in one write, in
order, and nothing is lost or added; an event alone goes out at once."""

from __future__ import annotations

import asyncio

from app.http import sse
from app.runs.active_runs import RunHandle


def handle() -> RunHandle:
    return RunHandle(run_id="r1", spec=None)  # the stream reads the queue only


async def chunks_of(h: RunHandle) -> list[str]:
    return [chunk async for chunk in sse.event_stream(h)]


async def test_events_already_queued_go_out_together_in_order_and_the_stream_ends_after_the_last():
    h = handle()
    words = [f"w{i} " for i in range(40)]
    for w in words:
        h.put("token", {"text": w})
    h.put("done", {"run_id": "r1"})
    chunks = await chunks_of(h)
    # A reply's 40 token events had 41 writes (each through the middlewares and the socket).
    assert len(chunks) == 1
    assert chunks[0] == "".join(sse.format_event("token", {"text": w}) for w in words) + sse.format_event("done", {"run_id": "r1"})


async def test_an_event_that_arrives_alone_is_sent_at_once_and_keep_alives_still_flow(monkeypatch):
    monkeypatch.setattr(sse, "KEEPALIVE_SECONDS", 0.05)
    h = handle()
    stream = sse.event_stream(h)
    assert await stream.__anext__() == ": keep-alive\n\n"  # nothing queued yet
    h.put("token", {"text": "Hello"})
    assert await asyncio.wait_for(stream.__anext__(), 1) == sse.format_event("token", {"text": "Hello"})
    h.put("error", {"code": "stopped"})
    assert await asyncio.wait_for(stream.__anext__(), 1) == sse.format_event("error", {"code": "stopped"})
    assert [c async for c in stream] == []
