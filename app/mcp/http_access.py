"""Who may call `memory-agent mcp --transport http`: the served user's API key, on an expected Host and Origin.

Over stdio the MCP host spawns the server as the user, so nothing is checked. Over HTTP anyone who
reaches the port could otherwise read, rewrite (``remember``) and erase (``forget``) the user's
memory, so every request must carry one of the served user's API keys, the same keys `serve`
takes (``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, `memory-agent keys create`):

- no key, or an unknown or revoked one: 401;
- a key of another user: 403 (the server answers only for the user named at start);
- a ``Host`` that is neither a loopback name nor the address listened on: 421 (after a wildcard
  ``--host`` such as 0.0.0.0, any Host: the key decides);
- an ``Origin`` (a browser page) that is neither a loopback page nor the address listened on: 403.

The key is checked on every request, not once per MCP session: a revoked key stops at once, and a
session id alone opens nothing. Errors are JSON-RPC errors, as the MCP transport's own are. The
user's forget generation read with the key goes with the request (``CALLER`` in its ASGI scope):
the tools' writes are refused when forget-me ran since (storage.owner_forgets), as `serve`'s are.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from storage.api_keys import Caller, authenticate

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
UNAUTHORIZED = -32001  # JSON-RPC server error range, as MCP SDKs use for auth failures
DATABASE_UNAVAILABLE = "The memory database is unavailable: try again shortly."
CALLER = "memory_agent.caller"
"""The ASGI scope's key for the (user, forget generation) the request's key was valid under."""


def _bare(host: str) -> str:
    return host.strip().strip("[]").lower()


def _hostname(authority: str | None) -> str | None:
    """The host name of a ``Host`` header value (port and IPv6 brackets dropped), None when unreadable."""
    if not authority:
        return None
    try:
        return urlsplit(f"//{authority}").hostname
    except ValueError:
        return None


class KeyRequired:
    """ASGI middleware in front of the MCP streamable-HTTP app: Host, Origin, then the user's key."""

    def __init__(self, app: ASGIApp, pool: AsyncConnectionPool, user_id: str, host: str) -> None:
        self.app, self.pool, self.user_id = app, pool, user_id
        bound = _bare(host)
        self.any_host = bound in WILDCARD_HOSTS
        self.names = LOOPBACK_NAMES | ({bound} if not self.any_host else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the session manager starts and stops through it
            await self.app(scope, receive, send)
            return
        refusal = await self.refusal(Headers(scope=scope))
        if isinstance(refusal, Caller):
            await self.app({**scope, CALLER: (refusal.user_id, refusal.generation)}, receive, send)
            return
        status, message = refusal
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED, "message": message}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def refusal(self, headers: Headers) -> tuple[int, str] | Caller:
        """(status, message) when the request may not reach the tools, else whom its key authenticates."""
        host = _hostname(headers.get("host"))
        if not self.any_host and host not in self.names:
            return 421, "Invalid Host header: this MCP server answers only to its own address and loopback names."
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin) if origin != "null" else None
            if parts is None or parts.scheme not in ("http", "https") or parts.hostname not in self.names:
                return 403, "Invalid Origin header: pages of other sites may not call this MCP server."
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        key = (token.strip() if scheme.lower() == "bearer" else "") or headers.get("x-api-key", "").strip()
        if not key:
            return 401, (
                f"Missing API key: MCP over HTTP needs one of {self.user_id}'s API keys, sent as "
                f"`Authorization: Bearer <key>` or `X-API-Key: <key>`. Create one with `memory-agent keys create --user {self.user_id}`."
            )
        try:
            caller = await authenticate(self.pool, key)
        except (psycopg.Error, PoolTimeout):
            log.exception("MCP over HTTP: the API key could not be checked")
            return 503, DATABASE_UNAVAILABLE
        if caller is None:
            return 401, "Unknown or revoked API key."
        if caller.user_id != self.user_id:
            return 403, "This API key belongs to another user: this MCP server serves only the user it was started for."
        return caller
