"""Named statements on LangGraph's store tables (``store``, ``store_vectors``) that its
``BaseStore`` API has no call for. Only storage/ holds SQL on LangGraph's tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from psycopg_pool import AsyncConnectionPool
from storage.partitions import resize_vectors
from storage.vector_search import ANN_INDEX


def prefix_of(namespace: Sequence[str]) -> str:
    return ".".join(namespace)  # how the Postgres store keys namespaces


async def delete_under(pool: AsyncConnectionPool, root: Sequence[str], lock_key: int) -> int:
    """Delete every item under the namespace ``root`` (vectors go with their items) in one
    transaction holding the advisory lock ``lock_key``; how many were deleted."""
    prefix = prefix_of(root)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
        # left() instead of LIKE: a user id may contain LIKE wildcards (_ and %).
        cur = await conn.execute(
            "DELETE FROM store WHERE prefix = %s OR left(prefix, %s) = %s", (prefix, len(prefix) + 1, prefix + ".")
        )
        return cur.rowcount


async def set_field(pool: AsyncConnectionPool, namespace: Sequence[str], keys: list[str], field: str, value: Any) -> None:
    """Set one top-level field of the items' values and nothing else (jsonb_set on the row), so a
    concurrent writer's change to any other field is never overwritten."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE store SET value = jsonb_set(value, ARRAY[%s], to_jsonb(%s::text)) WHERE prefix = %s AND key = ANY(%s)",
            (field, value.isoformat() if isinstance(value, datetime) else str(value), prefix_of(namespace), keys),
        )


async def counts(pool: AsyncConnectionPool) -> dict[str, Any]:
    """The database's size, the number of threads with checkpoints and of store items (``doctor``)."""
    async with pool.connection() as conn:
        size = await (await conn.execute("SELECT pg_size_pretty(pg_database_size(current_database())) AS s")).fetchone()
        threads = await (await conn.execute("SELECT count(DISTINCT thread_id) AS n FROM checkpoints")).fetchone()
        items = await (await conn.execute("SELECT count(*) AS n FROM store")).fetchone()
    return {"size": size["s"], "threads": threads["n"], "items": items["n"]}


async def reset_vectors(pool: AsyncConnectionPool, dims: int) -> None:
    """Empty ``store_vectors`` and set its column to ``dims`` (re-embedding with another model)."""
    async with pool.connection() as conn:
        exists = await (await conn.execute("SELECT to_regclass('store_vectors') IS NOT NULL AS e")).fetchone()
        if exists["e"]:
            async with conn.transaction():  # all or nothing: no emptied table left at the old size
                await conn.execute("DROP INDEX IF EXISTS store_vectors_embedding_idx")
                await conn.execute("DELETE FROM store_vectors")
                await resize_vectors(conn, "store_vectors", ANN_INDEX, dims)


async def all_keys(pool: AsyncConnectionPool) -> list[tuple[tuple[str, ...], str]]:
    """(namespace, key) of every store item: a reindex reads each value again under its user's lock."""
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT prefix, key FROM store")).fetchall()
    return [(tuple(r["prefix"].split(".")), r["key"]) for r in rows]
