"""`memory-agent reindex`: re-embed all memory and knowledge with the configured embeddings.

Needed after changing MEMORY_AGENT_EMBEDDINGS: vectors of different models must not be mixed.
The store's vector table is rebuilt at the new dimension, every store item is put
again (which re-embeds its indexed fields), the knowledge base is re-embedded, the
episodic index is rebuilt from the checkpoints, and the new model is recorded.
``reindex --episodes`` rebuilds the episodic index alone (it is derived data: e.g. after a
restore of the checkpoints, or to index chats written before the index existed).
"""

from __future__ import annotations


import knowledge
from memory import episodes
from memory.backend import make_store, set_up_schema
from memory.writer import records as memory_records
from storage import episodes as episode_table
from storage import store_rows, thread_owners
from storage.checkpoint_serde import checkpoint_saver
from storage.postgres import schema_lock
from storage.embeddings_record import write_record
from embeddings import EmbeddingsInfo
from psycopg_pool import AsyncConnectionPool

BATCH = 64


async def reindex(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> dict[str, int]:
    async with schema_lock(pool):
        await store_rows.reset_vectors(pool, embeddings.dims)
        chunks = await knowledge.reembed(pool, embeddings.embeddings, embeddings.dims)
        async with pool.connection() as conn:
            await episode_table.resize(conn, embeddings.dims)
        # Every table at the new size now: create what a database no chat has opened lacks
        # (the store's set-up among them, before its items are put again).
        store = make_store(pool, embeddings)
        await set_up_schema(pool, checkpoint_saver(pool), store, embeddings, check_embeddings=False, lock_held=True)
        items = await memory_records.reembed_items(store, await store_rows.all_keys(pool), batch=BATCH)
        messages = await _rebuild_episodes(pool, embeddings)
        await write_record(pool, embeddings.name, embeddings.dims)
        return {"store_items": items, "knowledge_chunks": chunks, "messages": messages}


async def reindex_episodes(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> dict[str, int]:
    """Rebuild the episodic index alone, from every owned thread's latest checkpoint."""
    async with schema_lock(pool):
        await set_up_schema(pool, checkpoint_saver(pool), make_store(pool, embeddings), embeddings, lock_held=True)
    return {"messages": await _rebuild_episodes(pool, embeddings)}


async def _rebuild_episodes(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> int:
    saver = checkpoint_saver(pool)
    # Only threads with a recorded owner: a thread nobody owns is reachable by no one.
    owned = await thread_owners.all_owned(pool)
    return await episodes.rebuild(pool, embeddings.embeddings, saver, [(owner, thread) for thread, owner in owned])
