"""One writer of a user's long-term memory at a time, across server processes.

Memory extraction reads the user's facts, decides (duplicate? merge? supersede?) and
writes. Two chats of the same user finishing at once would both decide "new fact"
and store it twice. Holding this lock around the memory-updating part of a turn
(and around edits through the API) serializes those read-decide-write steps.

Within a process an asyncio.Lock per user queues the waiters; across processes a
Postgres session advisory lock (keyed by a hash of the user id) is taken with
``pg_try_advisory_lock`` on one dedicated connection per process, retried with a
short sleep: waiting never holds a pooled connection, so a crowd of waiters cannot
starve the turns that hold the lock of connections.
"""

from __future__ import annotations

import asyncio
import hashlib
from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg

from storage.postgres import CONNECTION_KWARGS

LOCK_NAMESPACE = b"memory-agent:user-memory:"
RETRY_SECONDS = 0.02


def lock_key(user_id: str) -> int:
    """A signed 64-bit advisory-lock key for the user."""
    digest = hashlib.sha256(LOCK_NAMESPACE + user_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class UserWriteLocks:
    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.AsyncConnection | None = None
        self._conn_lock = asyncio.Lock()
        self._local: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    async def _execute(self, sql: str, key: int) -> bool:
        async with self._conn_lock:
            if self._conn is None or self._conn.closed:
                # A new session holds no locks: nothing else can be holding ours now.
                self._conn = await psycopg.AsyncConnection.connect(self._url, **CONNECTION_KWARGS)
            row = await (await self._conn.execute(sql, (key,))).fetchone()
            return bool(next(iter(row.values())))

    @asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        local = self._local.setdefault(user_id, asyncio.Lock())
        self._users[user_id] = self._users.get(user_id, 0) + 1
        try:
            async with local:
                key = lock_key(user_id)
                while not await self._execute("SELECT pg_try_advisory_lock(%s)", key):
                    await asyncio.sleep(RETRY_SECONDS)
                try:
                    yield
                finally:
                    await asyncio.shield(self._execute("SELECT pg_advisory_unlock(%s)", key))
        finally:
            self._users[user_id] -= 1
            if not self._users[user_id]:  # forget idle users' locks
                del self._users[user_id]
                self._local.pop(user_id, None)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
