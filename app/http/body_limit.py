"""ASGI middleware: a request body may not exceed a byte limit, counted as it arrives.

It runs before authentication and parsing. A ``Content-Length`` over the limit is
refused without reading a byte; any other body (chunked, or sized within the limit) is
read here, counting bytes, and refused with 413 the moment the count passes the limit,
so a worker never holds more than ``max_bytes`` of one request. The body read so far is
then handed to the app as one message; later ``receive`` calls (disconnect detection
of the SSE streams) go to the server as usual.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from app.http.errors import error_body

MAX_BODY_BYTES = 1_000_000  # a little over the longest message (20,000 characters) in any encoding, with room


class BodyLimit:
    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        lengths = [value for name, value in scope.get("headers") or () if name == b"content-length"]
        if any(not value.isdigit() or int(value) > self.max_bytes for value in lengths):
            return await self._refuse(scope, receive, send)

        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return await self.app(scope, _replay([message], receive), send)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        return await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, scope, receive, send) -> None:
        # Connection: close, so the server stops taking the rest of the body.
        response = JSONResponse(
            error_body("request_too_large", f"The request body is larger than {self.max_bytes:,} bytes."),
            status_code=413,
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _replay(messages: list[dict], receive):
    pending = list(messages)

    async def replay():
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
