"""`memory-agent reindex`: re-embed all memory and knowledge with the configured embeddings.

Needed after changing MEMORY_AGENT_EMBEDDINGS: vectors of different models must not be mixed.
The store's vector table is rebuilt at the new dimension, every store item is put
again (which re-embeds its indexed fields), the knowledge base is re-embedded, and
the new model is recorded.
"""

from __future__ import annotations

import knowledge
from memory.backend import make_store
from memory import memory_writer
from storage import store_rows
from storage.postgres import schema_lock
from embeddings.record import write_record
from embeddings import EmbeddingsInfo
from psycopg_pool import AsyncConnectionPool

BATCH = 64


async def reindex(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> dict[str, int]:
    async with schema_lock(pool):
        await store_rows.reset_vectors(pool, embeddings.dims)
        store = make_store(pool, embeddings)
        await store.setup()  # recreates the HNSW index when missing (migration SQL is idempotent)
        await store_rows.ensure_vector_index(pool)
        items = await memory_writer.reembed_items(store, await store_rows.all_items(pool), batch=BATCH)
        chunks = await knowledge.reembed(pool, embeddings.embeddings, embeddings.dims)
        await write_record(pool, embeddings.name, embeddings.dims)
        return {"store_items": items, "knowledge_chunks": chunks}
