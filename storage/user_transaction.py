"""One writer of a user's memory at a time, as a property of the transaction that writes it.

Every mutation of a user's memory (extraction, task tools, API edits, the CLI's /forget,
forget-me) runs inside :func:`user_transaction`: one Postgres transaction that first takes
``pg_advisory_xact_lock`` on the user's key, then does all its reads and writes on that one
connection. Two writers of one user queue on the lock in Postgres, whatever process or entry
point they come from; the lock ends with the transaction (commit, rollback or a dropped
connection), so it cannot leak. Callers do model calls and embeddings before entering it.

A request authenticated before its user was forgotten writes nothing: the transaction checks the
user's forget generation first (OwnerForgotten: :mod:`storage.owner_forgets`).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from langgraph.store.base import BaseStore

from storage import owner_forgets
from storage.postgres import advisory_key
from storage.memory_store import MemoryStore, memory_store

LOCK_NAMESPACE = b"memory-agent:user-memory:"


def lock_key(user_id: str) -> int:
    """The user's write lock's key."""
    return advisory_key(LOCK_NAMESPACE, user_id)


@asynccontextmanager
async def user_transaction(store: BaseStore, user_id: str) -> AsyncIterator[MemoryStore]:
    """Yield a store bound to one transaction that holds the user's write lock.

    Reads through it see every earlier writer's committed result; its writes commit together
    on exit, or not at all when the block raises.
    """
    store = memory_store(store)
    if store.conn is not store.pool:  # a store on one connection: nest in its transaction
        async with store.conn.transaction():
            await store.conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(user_id),))
            await owner_forgets.check(store.conn, user_id, owner_forgets.known_generation(user_id))
            yield store
        return
    async with store.pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(user_id),))
            await owner_forgets.check(conn, user_id, owner_forgets.known_generation(user_id))
            # The same index config and embeddings, on this one connection.
            yield store.on_connection(conn)


async def embed_ahead(store: BaseStore, texts: list[str]) -> None:
    """Embed ``texts`` in one batch before a transaction, so the store's embedding calls inside it
    hit the cache (the backend wraps its embeddings in a cache) and the lock is held only for SQL."""
    texts = [t for t in dict.fromkeys(texts) if t and t.strip()]
    if texts:
        await memory_store(store).embeddings.aembed_documents(texts)
