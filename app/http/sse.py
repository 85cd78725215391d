"""Server-Sent Events: one ``event:`` + ``data:`` (JSON) block per event, a comment as keep-alive.

Replies are sent with POST, so browsers read them with ``fetch`` and a stream reader
rather than ``EventSource``; the wire format is the standard one either way.
"""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

from fastapi.responses import StreamingResponse

from app.runs.active_runs import RunHandle

KEEPALIVE_SECONDS = 15.0

EVENTS_DOC = {
    "description": "Server-Sent Events: `token` {text}, `replaced` {text, withdrawn} (the reply kept is not what "
    "streamed: show `text` in place of `withdrawn`, the tokens' last `withdrawn` characters), `memory` {facts_added, …, described}, "
    "`summary` {folded_messages, summary}, `interrupt` {run_id, interrupts: [{id, value}]}, "
    "`done` {run_id, message_id, user_message_id, reply, usage, tokens_in, tokens_out, memory_written, elapsed_ms}, "
    "`error` {code, message, text?, message_id?, user_message_id?, reply?}: codes stopped, reply_failed, turn_failed, "
    "refused, memory_update_failed, database_unavailable (`text` gives a discarded message back; a stopped reply is kept "
    "as far as it got: `message_id`, `user_message_id` and `reply` name it, and memory learns nothing from it; after "
    "database_unavailable the turn is kept as a stopped one once the database is back). "
    "Exactly one of done, interrupt or error ends the stream, and the stream ends right after it.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def format_event(name: str, data: dict) -> str:
    payload = json.dumps(data, ensure_ascii=False, default=str)
    return f"event: {name}\ndata: {payload}\n\n"


async def event_stream(handle: RunHandle) -> AsyncIterator[str]:
    """The run's events; those already queued go out together, in one write. A reply streams a
    token event per word: under load, when the run is ahead of its client, each had its own pass
    through the middlewares and the socket (and its own ``wait_for``)."""
    queue = handle.queue
    while True:
        if queue.empty():
            try:
                # Queue.get is safe to time out: no event is lost.
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"
                continue
        else:
            item = queue.get_nowait()
        events: list[str] = []
        while item is not None:
            events.append(format_event(*item))
            if queue.empty():
                break
            item = queue.get_nowait()
        if events:
            yield "".join(events)
        if item is None:
            return


async def sse_response(handle: RunHandle) -> StreamingResponse:
    """The run's events as a streamed answer, once the run has recorded its turn (or ended):
    a client given a 200 has its message kept even if this worker dies the next moment."""
    await handle.accepted.wait()
    return StreamingResponse(
        event_stream(handle),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Run-Id": handle.run_id},
    )
