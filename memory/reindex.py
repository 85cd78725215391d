"""`memory-agent reindex`: re-embed all memory and knowledge with the configured embeddings.

Needed after changing MEMORY_AGENT_EMBEDDINGS: vectors of different models must not be mixed.
The store's vector table is rebuilt at the new dimension, every store item is put
again (which re-embeds its indexed fields), the knowledge base is re-embedded, and
the new model is recorded.
"""

from __future__ import annotations

import knowledge
from memory.backend import make_store
from storage.postgres import schema_lock
from embeddings.record import write_record
from embeddings import EmbeddingsInfo
from psycopg_pool import AsyncConnectionPool

BATCH = 64


async def reindex(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> dict[str, int]:
    async with schema_lock(pool):
        async with pool.connection() as conn:
            exists = await (await conn.execute("SELECT to_regclass('store_vectors') IS NOT NULL AS e")).fetchone()
            if exists["e"]:
                await conn.execute("DROP INDEX IF EXISTS store_vectors_embedding_idx")
                await conn.execute("DELETE FROM store_vectors")
                await conn.execute(f"ALTER TABLE store_vectors ALTER COLUMN embedding TYPE vector({int(embeddings.dims)})")
        store = make_store(pool, embeddings)
        await store.setup()  # recreates the HNSW index when missing (migration SQL is idempotent)
        async with pool.connection() as conn:
            await conn.execute(
                "CREATE INDEX IF NOT EXISTS store_vectors_embedding_idx ON store_vectors "
                "USING hnsw (embedding vector_cosine_ops) WITH (m=16, ef_construction=64)"
            )
            rows = await (await conn.execute("SELECT prefix, key, value FROM store")).fetchall()
        items = 0
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            for row in batch:
                namespace = tuple(row["prefix"].split("."))
                indexed = namespace[-1] != "profile"
                await store.aput(namespace, row["key"], row["value"], index=None if indexed else False)
                items += 1
        chunks = await knowledge.reembed(pool, embeddings.embeddings, embeddings.dims)
        await write_record(pool, embeddings.name, embeddings.dims)
        return {"store_items": items, "knowledge_chunks": chunks}
