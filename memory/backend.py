"""Open everything the agent persists to: one pool, the checkpointer, the store, the knowledge base."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

import knowledge
from storage import api_keys, chat_runs, episodes, forget_ledger, store_lookups, thread_owners, vector_search
from embeddings.cache import CachedEmbeddings
from embeddings.record import check_or_record
from embeddings import EmbeddingsInfo, resolve_embeddings
from core.namespaces import INDEXED_FIELDS
from storage.postgres import DatabaseInfo, database_url, open_pool, prepare_database, schema_lock
from storage.store_values import load_value

log = logging.getLogger(__name__)


@dataclass
class MemoryBackend:
    url: str
    info: DatabaseInfo
    pool: AsyncConnectionPool
    checkpointer: AsyncPostgresSaver
    store: AsyncPostgresStore
    embeddings: EmbeddingsInfo


def make_store(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> AsyncPostgresStore:
    return AsyncPostgresStore(
        conn=pool,
        index={
            "dims": embeddings.dims,
            "embed": embeddings.embeddings,
            "fields": INDEXED_FIELDS,
            "distance_type": "cosine",
            "ann_index_config": {"kind": "hnsw", "m": 16, "ef_construction": 64},
        },
        deserializer=load_value,  # a stored value that is not an object reads back as invalid, not as an error
    )


async def set_up_schema(
    pool: AsyncConnectionPool,
    saver: AsyncPostgresSaver,
    store: AsyncPostgresStore,
    embeddings: EmbeddingsInfo,
    *,
    check_embeddings: bool = True,
) -> None:
    """Idempotent: the embeddings check and the saver's, the store's and our own migrations,
    under one advisory lock so processes starting together do not collide."""
    dims = embeddings.dims
    async with schema_lock(pool):
        if check_embeddings:
            await check_or_record(pool, embeddings.name, embeddings.dims)
        await saver.setup()
        await store.setup()
        await store_lookups.setup(pool)
        await vector_search.setup(pool)
        await knowledge.setup(pool, dims)
        await episodes.setup(pool, dims)
        await forget_ledger.setup(pool)
        await api_keys.setup(pool)
        await chat_runs.setup(pool)
        await thread_owners.setup(pool)  # after the store and run records: its first set-up reads them


@asynccontextmanager
async def open_memory(
    url: str | None = None,
    embeddings: EmbeddingsInfo | None = None,
    *,
    check_embeddings: bool = True,
    max_pool_size: int = 10,
) -> AsyncIterator[MemoryBackend]:
    """Yield a ready backend; everything is closed on exit.

    Raises a MemoryAgentError with a clear message when the database is unreachable,
    lacks pgvector, or was built with other embeddings.
    """
    url = url or database_url()
    info = await prepare_database(url)
    emb = embeddings or resolve_embeddings()
    if not isinstance(emb.embeddings, CachedEmbeddings):
        emb = EmbeddingsInfo(embeddings=CachedEmbeddings(emb.embeddings), name=emb.name, dims=emb.dims)
    pool = await open_pool(url, max_size=max_pool_size)
    try:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        store = make_store(pool, emb)
        await set_up_schema(pool, saver, store, emb, check_embeddings=check_embeddings)
        yield MemoryBackend(url=url, info=info, pool=pool, checkpointer=saver, store=store, embeddings=emb)
    finally:
        await pool.close()
