"""langgraph.json's ``http.app``: what our LangGraph Server adds around langgraph-api's routes.

1. :class:`LocalOnly`, an ASGI middleware before everything (authentication included):

   * without required auth (``MEMORY_AGENT_AUTH=optional``, ``memory-agent studio``'s
     default) every caller without a key acts as the Studio user, so only this machine
     may call: a ``Host`` that is not a loopback name is refused with 421 (DNS rebinding:
     a page of attacker.example whose name now resolves to 127.0.0.1 sends
     ``Host: attacker.example``), and an ``Origin`` other than Studio's or a loopback
     page with 403. This must be a middleware: requests marked ``x-auth-scheme:
     langsmith`` (Studio's) skip our authentication handler altogether.
   * with required auth, Studio's scheme is refused (403) on every route, ``/mcp``
     included, instead of reaching handlers that cannot place it.

2. Its lifespan keeps the server's own thread records in step with Postgres: langgraph-api's
   in-memory runtime keeps a copy of each thread (metadata and the latest ``values``) in
   this process and in ``./.langgraph_api``. When a chat is deleted or its owner forgotten
   on any server of the database (``storage.thread_owners`` announces it), the records of
   those threads are deleted here too; at start, records of threads that no longer have an
   owner row (released while this server was down) are deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware

from app.studio.auth import auth_mode
from core.auth_user import studio_user
from storage import thread_owners

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
# Without a key a browser page of any site could act as the Studio user: only Studio's own
# origin and pages on this machine may call (langgraph.json sets the same for CORS).
STUDIO_ORIGIN = "https://smith.langchain.com"
LOOPBACK_ORIGIN = re.compile(r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?$")
RECONNECT_SECONDS = 5


def _host_name(host: str) -> str:
    """``Host`` without its port (``[::1]:2024`` → ``[::1]``), lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_allowed(origin: str) -> bool:
    return origin == STUDIO_ORIGIN or bool(LOOPBACK_ORIGIN.match(origin))


def refusal(scope, receive, send, status: int, detail: str):
    from starlette.responses import JSONResponse

    return JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)


class LocalOnly:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        if auth_mode() == "required":
            if headers.get("x-auth-scheme", "").strip().lower() == "langsmith":
                return await refusal(
                    scope, receive, send, 403,
                    "LangGraph Studio is not authenticated by this server (MEMORY_AGENT_AUTH=required): use an API key.",
                )
            return await self.app(scope, receive, send)
        host = _host_name(headers.get("host", ""))
        if host not in LOOPBACK_HOSTS:
            return await refusal(
                scope, receive, send, 421,
                f"Host {host or '(none)'} is refused: without required API keys this server answers only "
                "requests addressed to localhost, 127.0.0.1 or [::1] (set MEMORY_AGENT_AUTH=required to serve others).",
            )
        origin = headers.get("origin")
        if origin and not origin_allowed(origin):
            return await refusal(
                scope, receive, send, 403,
                f"Requests from {origin} are refused: without API keys only Studio and pages on this machine may call.",
            )
        return await self.app(scope, receive, send)


# --------------------------------------------------------------------------- thread records
def _owner_of_record(thread: dict) -> str | None:
    metadata = thread.get("metadata")
    if isinstance(metadata, (bytes, str)):  # stored encrypted/serialized by some runtimes
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return None
    return metadata.get("owner") if isinstance(metadata, dict) else None


async def drop_thread_records(*, owner: str | None = None, thread_ids: set[str] | None = None) -> int:
    """Delete this server's records (thread, its runs) of ``owner``'s threads or of ``thread_ids``."""
    from langgraph_runtime.database import connect
    from langgraph_runtime.ops import Threads

    dropped = 0
    async with connect() as conn:
        doomed = [
            t["thread_id"] for t in list(conn.store["threads"])
            if (owner is not None and _owner_of_record(t) == owner) or (thread_ids and str(t["thread_id"]) in thread_ids)
        ]
        for thread_id in doomed:
            try:
                await Threads.delete(conn, thread_id)  # no auth context: the server's own clean-up
                dropped += 1
            except Exception:  # already gone (a client deleted it meanwhile)
                log.debug("thread record %s was already gone", thread_id)
    return dropped


async def drop_unowned_records(pool) -> int:
    """Delete the records of threads whose owner row is gone (released while we were down, or
    released by its owner's forget-me while Studio's user keeps the record; see below)."""
    from langgraph_runtime.database import connect

    async with connect() as conn:
        by_owner: dict[str, set[str]] = {}
        for t in list(conn.store["threads"]):
            owner = _owner_of_record(t)
            if owner:
                by_owner.setdefault(owner, set()).add(str(t["thread_id"]))
    stale: set[str] = set()
    keyless = studio_user()
    for owner, ids in by_owner.items():
        rows = await thread_owners.owners_of(pool, ids)
        # A thread Studio made and handed to the user its run named keeps Studio's user on its record.
        stale |= {i for i in ids if i not in rows or (rows[i] != owner and owner != keyless)}
    return await drop_thread_records(thread_ids=stale) if stale else 0


async def follow_releases(url: str, pool) -> None:
    """Drop thread records as ``storage.thread_owners`` announces releases; reconnects after a drop."""
    while True:
        try:
            async for kind, value in thread_owners.released(url):
                if kind == "owner":
                    # Also the threads handed to that user, whose records are Studio's user's.
                    dropped = await drop_thread_records(owner=value) + await drop_unowned_records(pool)
                else:
                    dropped = await drop_thread_records(thread_ids={value})
                if dropped:
                    log.info("memory-agent: dropped %d thread record(s) released elsewhere (%s)", dropped, kind)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database restarted or went away: listen again
            log.warning("memory-agent: listening for released threads failed (%s); retrying in %ss", exc, RECONNECT_SECONDS)
        await asyncio.sleep(RECONNECT_SECONDS)


@asynccontextmanager
async def lifespan(_app):
    from app.studio.backend import shared_backend

    async with shared_backend().use() as backend:
        try:
            dropped = await drop_unowned_records(backend.pool)
            if dropped:
                log.info("memory-agent: dropped %d thread record(s) whose chats were deleted meanwhile", dropped)
        except Exception:
            log.exception("memory-agent: could not check thread records against their owners")
        follower = asyncio.create_task(follow_releases(backend.url, backend.pool))
        try:
            yield
        finally:
            follower.cancel()
            try:
                await follower
            except asyncio.CancelledError:
                pass


app = Starlette(middleware=[Middleware(LocalOnly)], lifespan=lifespan)
