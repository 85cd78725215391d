"""ASGI middleware: a request body may not exceed a byte limit, counted as it arrives.

It runs before authentication and parsing. A ``Content-Length`` over the limit is
refused without reading a byte; a route in :data:`READ_BY_ROUTE` reads its body itself, after
authentication, within the same limit; any other body (chunked, or sized within the limit) is
read here, counting bytes, and refused with 413 the moment the count passes the limit,
so a worker never holds more than ``max_bytes`` of one request. The body read so far is
then handed to the app as one message; later ``receive`` calls (disconnect detection
of the SSE streams) go to the server as usual.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from app.http.errors import error_body

from memory.chat_import import MAX_IMPORT_BYTES

MAX_BODY_BYTES = 1_000_000  # a little over the longest message (20,000 characters) in any encoding, with room
IMPORT_MAX_BODY_BYTES = MAX_IMPORT_BYTES  # POST /chats/import: a whole history (LoCoMo's longest conversation is ~250 kB)
LIMITS_BY_ROUTE = {("POST", "/chats/import"): IMPORT_MAX_BODY_BYTES}
# Routes that read their body themselves, after authenticating the caller (a stranger's body is
# never read) and counting it against the same limit: only a declared length is checked here.
READ_BY_ROUTE = {("POST", "/chats/import")}


class BodyLimit:
    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES, by_route: dict[tuple[str, str], int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.by_route = LIMITS_BY_ROUTE if by_route is None else by_route

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.by_route.get((scope.get("method", ""), scope.get("path", "")), self.max_bytes)
        lengths = [value for name, value in scope.get("headers") or () if name == b"content-length"]
        if any(not value.isdigit() or int(value) > limit for value in lengths):
            return await self._refuse(scope, receive, send, limit)
        if (scope.get("method", ""), scope.get("path", "")) in READ_BY_ROUTE:
            return await self.app(scope, receive, send)

        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return await self.app(scope, _replay([message], receive), send)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._refuse(scope, receive, send, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        return await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, scope, receive, send, limit: int) -> None:
        # Connection: close, so the server stops taking the rest of the body.
        response = JSONResponse(
            error_body("request_too_large", f"The request body is larger than {limit:,} bytes."),
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
