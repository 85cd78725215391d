"""Open everything the agent persists to: one pool, the checkpointer, the store, the knowledge base."""

from __future__ import annotations

import gc
import logging
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import AsyncIterator

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

import knowledge
from storage.checkpoint_serde import checkpoint_saver
from storage import api_keys, chat_imports, checkpoint_rows, chat_runs, chat_sources, episodes, forget_ledger, partitions, store_lookups, thread_owners, vector_search
from embeddings.cache import CachedEmbeddings
from storage.embeddings_record import check_or_record
from embeddings import EmbeddingsInfo, resolve_embeddings
from core.namespaces import INDEXED_FIELDS
from storage.postgres import DatabaseInfo, database_url, open_pool, prepare_database, schema_lock
from storage.memory_store import MemoryStore

log = logging.getLogger(__name__)

_start_up_frozen = False


def freeze_start_up(*, again: bool = False) -> None:
    """Move what the process built so far (modules, classes, the graph's parts) out of the cyclic
    GC's reach, once per process (``again``: what was built since, too: a server worker's warm-up).
    It lives as long as the process, yet each full collection walked it: 113 ms in one of
    bench_turn's turns, its slowest. Later objects are collected as before."""
    global _start_up_frozen
    if again or not _start_up_frozen:
        gc.collect()  # what is garbage already is not frozen with the rest
        gc.freeze()
        _start_up_frozen = True


@dataclass
class MemoryBackend:
    url: str
    info: DatabaseInfo
    pool: AsyncConnectionPool
    checkpointer: AsyncPostgresSaver
    store: MemoryStore
    embeddings: EmbeddingsInfo
    migrated: list[str] = field(default_factory=list)
    """What the set-up moved to the current layout (``memory-agent migrate`` prints it)."""


def make_store(pool: AsyncConnectionPool, embeddings: EmbeddingsInfo) -> MemoryStore:
    """The store every entry point hands the graph (nodes reach it through storage.memory_store)."""
    return MemoryStore(
        pool,
        index={
            "dims": embeddings.dims,
            "embed": embeddings.embeddings,
            "fields": INDEXED_FIELDS,
            "distance_type": "cosine",
            # langgraph's async set-up builds this index over everyone's vectors whatever the kind
            # ("flat" fails there); no search uses it, and it goes with the plain table that
            # vector_search.setup moves to partitions.
            "ann_index_config": {"kind": "hnsw", "m": 16, "ef_construction": 64},
        },
        # MemoryStore's deserializer (storage.store_values.load_value): a stored value that is not an
        # object reads back as invalid, not as an error
    )


async def set_up_schema(
    pool: AsyncConnectionPool,
    saver: AsyncPostgresSaver,
    store: AsyncPostgresStore,
    embeddings: EmbeddingsInfo,
    *,
    check_embeddings: bool = True,
    lock_held: bool = False,
) -> list[str]:
    """Idempotent: the embeddings check and the saver's, the store's and our own migrations,
    under one advisory lock so processes starting together do not collide. Returns what was
    moved to the current layout (the per-user tables' partitions, storage/partitions.py).
    ``lock_held``: the caller holds the lock already (reindex; the lock is per session, and the
    pool's next connection is another session, so taking it again would wait forever)."""
    dims = embeddings.dims
    migrated: list[str] = []
    async with nullcontext() if lock_held else schema_lock(pool):
        if check_embeddings:
            await check_or_record(pool, embeddings.name, embeddings.dims)
        await saver.setup()
        await store.setup()
        await store_lookups.setup(pool)
        migrated += await partitions.drop_old_own_indexes(pool)
        migrated += await vector_search.setup(pool)
        await knowledge.setup(pool, dims)
        migrated += await episodes.setup(pool, dims)
        await forget_ledger.setup(pool)
        await api_keys.setup(pool)
        await chat_runs.setup(pool)
        await thread_owners.setup(pool)  # after the store and run records: its first set-up reads them
        await chat_imports.setup(pool)
        await chat_sources.setup(pool)  # references thread_owners' table
    for line in migrated:
        log.warning("migrated: %s", line)
    return migrated


def refuse_bad_settings() -> None:
    """Read every process-wide setting once, so that a bad value stops the command at start with
    a SettingError naming it. Read only where it is used, one failed late: a bad
    MEMORY_AGENT_EMBEDDING_THREADS after the chat's first reply was saved, a bad summary prompt
    by discarding the first message."""
    import prompts
    from core.context import environment_context
    from core.env_settings import env_seconds
    from core.errors import SettingError
    from embeddings.batching import default_threads
    from llm.chat_model import DEFAULT_TIMEOUT_SECONDS, TIMEOUT_ENV
    from llm.structured import configured_method
    from storage.checkpoint_serde import cache_budget_bytes
    from storage.postgres import pool_wait_seconds

    checkpoint_rows.history_turns()
    cache_budget_bytes()
    default_threads()
    pool_wait_seconds()
    env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS)
    configured_method()
    context = environment_context()
    try:
        prompts.summary_variant(context.summary_prompt)
    except ValueError as exc:
        raise SettingError(f"MEMORY_AGENT_SUMMARY_PROMPT={context.summary_prompt!r}: {exc}") from None


@asynccontextmanager
async def open_memory(
    url: str | None = None,
    embeddings: EmbeddingsInfo | None = None,
    *,
    check_embeddings: bool = True,
    max_pool_size: int = 10,
    min_pool_size: int = 1,
) -> AsyncIterator[MemoryBackend]:
    """Yield a ready backend; everything is closed on exit.

    Raises a MemoryAgentError with a clear message when the database is unreachable,
    lacks pgvector, or was built with other embeddings.
    """
    refuse_bad_settings()  # before anything opens
    url = url or database_url()
    info = await prepare_database(url)
    emb = embeddings or resolve_embeddings()
    if not isinstance(emb.embeddings, CachedEmbeddings):
        emb = EmbeddingsInfo(embeddings=CachedEmbeddings(emb.embeddings), name=emb.name, dims=emb.dims)
    pool = await open_pool(url, max_size=max_pool_size, min_size=min_pool_size)
    try:
        saver = checkpoint_saver(pool)
        store = make_store(pool, emb)
        migrated = await set_up_schema(pool, saver, store, emb, check_embeddings=check_embeddings)
        freeze_start_up()
        yield MemoryBackend(url=url, info=info, pool=pool, checkpointer=saver, store=store, embeddings=emb, migrated=migrated)
    finally:
        await pool.close()
