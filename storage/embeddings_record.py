"""Which embedding model built the vectors in this database (the ``memory_agent_meta`` table).

Vectors of different models (or dimensions) must never be mixed, so the first
start records the model and its dims, and later starts with another model are
refused until ``memory-agent reindex`` re-embeds everything.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from core.errors import EmbeddingMismatch

REINDEX_COMMAND = "memory-agent reindex"

CREATE_META = """
CREATE TABLE IF NOT EXISTS memory_agent_meta (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""


async def read_record(pool: AsyncConnectionPool) -> dict | None:
    async with pool.connection() as conn:
        await conn.execute(CREATE_META)
        row = await (await conn.execute("SELECT value FROM memory_agent_meta WHERE key = 'embeddings'")).fetchone()
    return row["value"] if row else None


async def write_record(pool: AsyncConnectionPool, name: str, dims: int) -> None:
    from psycopg.types.json import Jsonb

    async with pool.connection() as conn:
        await conn.execute(CREATE_META)
        await conn.execute(
            """INSERT INTO memory_agent_meta (key, value) VALUES ('embeddings', %s)
               ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()""",
            (Jsonb({"model": name, "dims": dims}),),
        )


async def check_or_record(pool: AsyncConnectionPool, name: str, dims: int) -> None:
    """Record the model on first use; refuse a different one afterwards."""
    record = await read_record(pool)
    if record is None:
        await write_record(pool, name, dims)
        return
    if record.get("model") != name or int(record.get("dims", -1)) != dims:
        raise EmbeddingMismatch(
            f"This database's vectors were built with {record.get('model')} ({record.get('dims')} dims), "
            f"but the configured embeddings are {name} ({dims} dims). Mixing them would make recall wrong. "
            f"Run `{REINDEX_COMMAND}` to re-embed all memory and knowledge with {name}, "
            "or set MEMORY_AGENT_EMBEDDINGS back to the recorded model."
        )
