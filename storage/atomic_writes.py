"""Write several store items in one Postgres transaction: all of them or none.

The pooled store runs each statement in autocommit mode, so a failure half-way
through a batch would leave half an update. Here the batch runs on one connection
inside a transaction; embeddings are computed before the first write.
"""

from __future__ import annotations

from typing import Sequence

from langgraph.store.base import PutOp
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool


async def write_atomically(store: AsyncPostgresStore, ops: Sequence[PutOp]) -> None:
    if not ops:
        return
    if not isinstance(store, AsyncPostgresStore):  # e.g. an in-memory store: its batch is already all-or-nothing
        await store.abatch(ops)
        return
    pool = store.conn
    if not isinstance(pool, AsyncConnectionPool):  # already a single connection
        async with pool.transaction():
            await store.abatch(ops)
        return
    async with pool.connection() as conn:
        async with conn.transaction():
            # A store of its own on this one connection, with the same index config and embeddings.
            # (Not a copy of ``store``: a copy shares its batching task and cancels it when collected.)
            tx_store = AsyncPostgresStore(conn, index=store.index_config)
            await tx_store.abatch(ops)
