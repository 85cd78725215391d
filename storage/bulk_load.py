"""Writing many store items with embeddings already computed, in two COPYs.

The rows are those ``AsyncPostgresStore.aput`` writes (``store`` and ``store_vectors``),
so the store, recall and ``storage.vector_search`` read them like any other item; only
the per-item round trips and the embedding calls are skipped. For seeding benchmarks and
tests with 100,000s of memories, and nothing else: it skips the writer's checks (each kind's
model and limits, the user's lock, the forget ledger), which every write of the product passes
through (memory.writer). No entry point of the product calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from psycopg import AsyncConnection
from psycopg.types import TypeInfo


@dataclass
class BulkItem:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    # The vector of ``field_name`` in the value; None stores the item unembedded.
    embedding: Sequence[float] | None = None
    field_name: str = "text"
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    updated_at: datetime | None = None


async def copy_items(conn: AsyncConnection, items: Sequence[BulkItem]) -> int:
    """Insert ``items`` (new keys only: COPY does not upsert), all or nothing.

    Runs in a transaction of its own, or a savepoint of the caller's. Returns how many
    items were written. A key that already exists fails with a unique violation, and
    none of the items is written.
    """
    from pgvector.psycopg.vector import register_vector_info

    for item in items:
        if not item.namespace or any(not part or "." in part for part in item.namespace):
            raise ValueError(f"invalid namespace {item.namespace!r}: its parts must be non-empty, without '.'")
    async with conn.transaction(), conn.cursor() as cur:
        # The vector adapters live on this cursor only: the pool's connections stay as they were.
        register_vector_info(cur, await TypeInfo.fetch(conn, "vector"))
        async with cur.copy("COPY store (prefix, key, value, created_at, updated_at) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "jsonb", "timestamptz", "timestamptz"])
            for item in items:
                prefix = ".".join(item.namespace)
                await copy.write_row((prefix, item.key, item.value, item.created_at, item.updated_at or item.created_at))
        async with cur.copy(
            "COPY store_vectors (prefix, key, field_name, embedding, created_at, updated_at) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "vector", "timestamptz", "timestamptz"])
            for item in items:
                if item.embedding is None:
                    continue
                prefix = ".".join(item.namespace)
                when = item.updated_at or item.created_at
                await copy.write_row((prefix, item.key, item.field_name, _array(item.embedding), item.created_at, when))
    return len(items)


def _array(embedding: Sequence[float]):
    import numpy as np

    return np.asarray(embedding, dtype=np.float32)
