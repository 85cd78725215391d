"""Every error of the chat API has one JSON shape: ``{"error": {"code", "message"}}``.

Codes clients can branch on:
401 ``unauthorized`` · 403 ``forbidden`` · 404 ``not_found`` · 409 ``reply_in_progress``,
``confirmation_pending``, ``no_pending_confirmation``, ``invalid_item`` (a stored item that does not
validate: delete it), ``item_is_valid``, ``import_in_progress``, ``import_cancelled``, ``not_resumable`` ·
410 ``user_forgotten`` (forget-me ran after the request was authenticated: nothing written) ·
413 ``message_too_long``, ``import_too_large`` · 429 ``too_many_imports`` ·
422 ``invalid_message``, ``invalid_request`` (also a value the database refuses) · 500 ``internal_error`` · 503 ``database_unavailable``.
"""

from __future__ import annotations

import logging
import re

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import DatabaseUnreachable, InvalidMessage, MemoryAgentError
from storage.owner_forgets import OwnerForgotten
from storage.thread_owners import ChatGone

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_body(code: str, message: str, **extra) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found.")


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _describe_validation(exc: RequestValidationError, request: Request | None = None) -> str:
    media = (request.headers.get("content-type", "") if request is not None else "").split(";")[0].strip().casefold()
    json_media = media == "application/json" or media.endswith("+json")
    if request is not None and request.method in ("POST", "PUT", "PATCH") and not json_media and any(
        tuple(e.get("loc", ()))[:1] == ("body",) for e in exc.errors()
    ):
        # Without the JSON media type the body is not read as JSON: "not a valid dictionary" named the wrong fault.
        return f"Invalid request: send the body as JSON with Content-Type: application/json (it came as {media or 'no type'})."
    for err in exc.errors():
        if err.get("type") == "json_invalid":  # was "1: JSON decode error", a byte position named as a field
            where = tuple(err.get("loc", ()))[1:2]
            at = f" at character {where[0]}" if where and isinstance(where[0], int) else ""
            reason = (err.get("ctx") or {}).get("error") or "it cannot be read"
            return f"Invalid request: the body is not valid JSON ({reason}{at})."
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "Invalid request: " + "; ".join(parts)


def _methods_on(request: Request) -> list[str]:
    """Every method the API's documented routes take on the request's path."""
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)), request.url.path):
            methods |= {m.upper() for m in operations if m in ("get", "post", "put", "patch", "delete")}
    return sorted(methods)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        if exc.status >= 500:  # the caller gets the words; the log keeps what caused it
            log.error("%s on %s %s: %s", exc.code, request.method, request.url.path, exc.message, exc_info=exc.__cause__ or exc)
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return JSONResponse(error_body("invalid_request", _describe_validation(exc, request), details=details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            # Starlette names the methods of the first route on the path only ("POST /chats/x": Allow: GET),
            # from a set (its order varies by run); a path the API's schema leaves out (the page,
            # /openapi.json) keeps Starlette's methods, sorted.
            given = [m.strip() for m in (headers or {}).get("Allow", "").split(",") if m.strip()]
            headers = {**(headers or {}), "Allow": ", ".join(_methods_on(request) or sorted(given))}
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=headers)

    @app.exception_handler(InvalidMessage)
    async def _invalid_message(request: Request, exc: InvalidMessage):
        return JSONResponse(error_body("invalid_message", str(exc)), status_code=422)

    @app.exception_handler(ChatGone)
    async def _chat_gone(request: Request, exc: ChatGone):
        # Deleted between the request's check and its write (a rename racing DELETE /chats/{id}).
        return JSONResponse(error_body("not_found", f"No chat with id {exc.thread_id}: it was deleted."), status_code=404)

    @app.exception_handler(OwnerForgotten)
    async def _forgotten(request: Request, exc: OwnerForgotten):
        return JSONResponse(error_body("user_forgotten", str(exc)), status_code=410)

    @app.exception_handler(DatabaseUnreachable)
    async def _db_down(request: Request, exc: DatabaseUnreachable):
        return JSONResponse(error_body("database_unavailable", str(exc)), status_code=503)

    @app.exception_handler(psycopg.OperationalError)
    async def _db_error(request: Request, exc: psycopg.OperationalError):
        log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body("database_unavailable", "The database is not reachable right now; try again shortly."), status_code=503)

    @app.exception_handler(psycopg.DataError)
    async def _bad_value(request: Request, exc: psycopg.DataError):
        # A value Postgres cannot take (NUL, bad encoding) that no schema caught: the caller's input, not a fault.
        log.warning("value refused by the database on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body("invalid_request", "A value in the request cannot be stored (e.g. a NUL character)."), status_code=422)

    @app.exception_handler(MemoryAgentError)
    async def _agent_error(request: Request, exc: MemoryAgentError):
        log.error("agent error on %s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        return JSONResponse(error_body("agent_error", str(exc)), status_code=500)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", f"Internal error ({type(exc).__name__})."), status_code=500)
