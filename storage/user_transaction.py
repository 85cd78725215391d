"""One writer of a user's memory at a time, as a property of the transaction that writes it.

Every mutation of a user's memory (extraction, task tools, API edits, the CLI's /forget,
forget-me) runs inside :func:`user_transaction`: one Postgres transaction that first takes
``pg_advisory_xact_lock`` on the user's key, then does all its reads and writes on that one
connection. Two writers of one user queue on the lock in Postgres, whatever process or entry
point they come from; the lock ends with the transaction (commit, rollback or a dropped
connection), so it cannot leak. Callers do model calls and embeddings before entering it.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from contextlib import asynccontextmanager
from typing import AsyncIterator

from langgraph.store.base import BaseStore
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from storage.store_values import load_value

LOCK_NAMESPACE = b"memory-agent:user-memory:"

# Stores that are not Postgres (in-memory stores in tests) serialize per process instead.
_local_locks: "weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock]" = weakref.WeakValueDictionary()


def lock_key(user_id: str) -> int:
    """A signed 64-bit advisory-lock key for the user."""
    digest = hashlib.sha256(LOCK_NAMESPACE + user_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@asynccontextmanager
async def user_transaction(store: BaseStore, user_id: str) -> AsyncIterator[BaseStore]:
    """Yield a store bound to one transaction that holds the user's write lock.

    Reads through it see every earlier writer's committed result; its writes commit together
    on exit, or not at all when the block raises.
    """
    if not isinstance(store, AsyncPostgresStore):
        lock = _local_locks.setdefault((id(store), user_id), asyncio.Lock())
        async with lock:
            yield store
        return
    pool = store.conn
    if not isinstance(pool, AsyncConnectionPool):  # a store on one connection: nest in its transaction
        async with pool.transaction():
            await pool.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(user_id),))
            yield store
        return
    async with pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(user_id),))
            # A store of its own on this one connection, with the same index config and embeddings.
            # (Not a copy of ``store``: a copy shares its batching task and cancels it when collected.)
            yield AsyncPostgresStore(conn, index=store.index_config, deserializer=load_value)


async def embed_ahead(store: BaseStore, texts: list[str]) -> None:
    """Embed ``texts`` in one batch before a transaction, so the store's embedding calls inside it
    hit the cache (the backend wraps its embeddings in a cache) and the lock is held only for SQL."""
    config = getattr(store, "index_config", None) or {}
    embed = config.get("embed")
    texts = [t for t in dict.fromkeys(texts) if t and t.strip()]
    if embed is not None and texts and hasattr(embed, "aembed_documents"):
        await embed.aembed_documents(texts)
