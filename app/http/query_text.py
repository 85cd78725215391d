"""ASGI middleware: a query string must decode as UTF-8.

Starlette decodes a query's percent-escapes with ``errors="replace"``, so ``?q=%ff`` reached a
route as U+FFFD and was searched for as if the client had meant it. Such a request is refused
with 422 instead, before authentication and parsing (it is the request's syntax, whoever sends it).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.responses import JSONResponse

from app.http.errors import error_body


class QueryText:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        raw = (scope.get("query_string") or b"") if scope["type"] == "http" else b""
        if raw:
            try:
                parse_qsl(raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict")
            except UnicodeDecodeError as exc:
                body = error_body(
                    "invalid_request",
                    f"The query string is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}): percent-encode its text as UTF-8.",
                )
                return await JSONResponse(body, status_code=422)(scope, receive, send)
        return await self.app(scope, receive, send)
