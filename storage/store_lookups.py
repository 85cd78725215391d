"""Indexed lookups of store items by a field of their value, so writers never list a namespace.

LangGraph's store filters ``value`` after selecting a whole namespace (O(items)). The memory
writer asks narrower questions ("an active fact with this text hash", "active facts in this
slot"); expression indexes on the store table answer them in O(log n).
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import BaseStore
from psycopg_pool import AsyncConnectionPool

from storage.memory_store import memory_store

# Expression indexes on LangGraph's own store table (created after store.setup(); idempotent).
INDEXES = (
    "CREATE INDEX IF NOT EXISTS store_value_hash_idx ON store (prefix, (value->>'hash')) WHERE value ? 'hash'",
    "CREATE INDEX IF NOT EXISTS store_value_slot_idx ON store (prefix, (value->>'slot')) WHERE value ? 'slot'",
    "CREATE INDEX IF NOT EXISTS store_value_source_message_idx ON store (prefix, (value->>'source_message_id'))"
    " WHERE value ? 'source_message_id'",
)
INDEXED_FIELDS = frozenset({"hash", "slot", "source_message_id"})


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        for statement in INDEXES:
            await conn.execute(statement)


async def items_where(
    store: BaseStore, namespace: tuple[str, ...], field: str, values: list[str], *, status: str | None = "active", limit: int = 20
) -> list[tuple[str, dict[str, Any]]]:
    """(key, value) of the items in ``namespace`` whose ``value[field]`` is one of ``values``."""
    if field not in INDEXED_FIELDS:
        raise ValueError(f"{field!r} has no index; add one to INDEXES first")
    if not values:
        return []
    sql = (
        f"SELECT key, value FROM store WHERE prefix = %s AND value->>'{field}' = ANY(%s)"
        + (" AND value->>'status' = %s" if status is not None else "")
        + " ORDER BY updated_at DESC LIMIT %s"
    )
    params: tuple = (".".join(namespace), list(values), *((status,) if status is not None else ()), limit)
    rows = await _rows(store, sql, params)
    return [(r["key"], r["value"]) for r in rows]


async def field_of(store: BaseStore, namespace: tuple[str, ...], keys: list[str], field: str) -> dict[str, Any]:
    """``value[field]`` of each item of ``namespace`` among ``keys`` that exists (one query: reading
    whole items through the store's batch costs ~4 ms for a few dozen, on a turn's critical path)."""
    if not keys:
        return {}
    sql = (
        "SELECT key, value -> %s AS v FROM store WHERE prefix = %s AND key = ANY(%s) AND value ? %s"
        " AND (expires_at IS NULL OR expires_at > now())"  # as the store's own reads
    )
    rows = await _rows(store, sql, (field, ".".join(namespace), list(keys), field))
    return {r["key"]: r["v"] for r in rows}


async def _rows(store: BaseStore, sql: str, params: tuple) -> list[dict[str, Any]]:
    """``sql`` run on the store's own connection: its pool, or the writer's transaction."""
    conn = memory_store(store).conn
    if isinstance(conn, AsyncConnectionPool):
        async with conn.connection() as c:
            return await (await c.execute(sql, params)).fetchall()
    return await (await conn.execute(sql, params)).fetchall()
