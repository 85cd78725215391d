"""storage.memory_store: the one store the agent runs on, and the one accessor to it.

Every entry point hands the graph a MemoryStore (memory.backend.make_store; the LangGraph
server's ServerStore is one too), so the pool, the embeddings and the checkpoint reader reach
nodes typed. Any other store is refused by name, not half-served by a fallback.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore

from memory.recall import rank_facts
from nodes.retrieve import retrieve
from storage.memory_store import MemoryStore, memory_store
from storage.user_transaction import user_transaction


async def test_the_backend_store_carries_its_pool_embeddings_and_checkpoint_reader(backend):
    store = memory_store(backend.store)
    assert store is backend.store
    assert store.pool is backend.pool and store.conn is backend.pool
    assert store.embeddings is backend.embeddings.embeddings
    reader = store.checkpoint_reader()
    assert isinstance(reader, AsyncPostgresSaver) and reader.conn is backend.pool


async def test_a_transaction_store_keeps_the_pool_and_embeddings_on_its_own_connection(backend, user_id):
    async with user_transaction(backend.store, user_id) as tx:
        assert isinstance(tx, MemoryStore) and tx is not backend.store
        assert tx.pool is backend.pool and tx.conn is not backend.pool
        assert tx.embeddings is backend.store.embeddings
        async with user_transaction(tx, user_id) as nested:  # nests in the same transaction
            assert nested is tx


@pytest.mark.parametrize("foreign", ["in-memory", "plain Postgres"])
async def test_a_store_that_is_not_ours_is_refused_with_a_clear_message(backend, foreign):
    if foreign == "in-memory":
        store = InMemoryStore()
    else:
        store = AsyncPostgresStore(backend.pool, index=backend.store.index_config)
    with pytest.raises(TypeError, match=rf"MemoryStore.*make_store.*not {type(store).__name__}"):
        memory_store(store)
    with pytest.raises(TypeError, match="MemoryStore"):
        memory_store(None)
    # What used to fall back to an in-memory search (or to nothing) now says so instead.
    with pytest.raises(TypeError, match=type(store).__name__):
        await rank_facts(store, "someone", "what do I like?")


async def test_a_node_given_another_store_fails_loudly_rather_than_skipping_its_step(backend):
    from types import SimpleNamespace

    from langchain_core.messages import HumanMessage

    from core.context import Context
    from core.state import State

    runtime = SimpleNamespace(store=InMemoryStore(), context=Context(user_id="someone"))
    with pytest.raises(TypeError, match="InMemoryStore"):
        await retrieve(State(messages=[HumanMessage("hello", id="h1")]), runtime)


async def test_a_memory_store_needs_embeddings_and_the_pool(backend):
    with pytest.raises(ValueError, match="embed must be provided"):  # langgraph's own check
        MemoryStore(backend.pool, index={"dims": 4, "fields": ["text"]})
    with pytest.raises(TypeError, match="embeddings"):
        MemoryStore(backend.pool, index={})  # type: ignore[typeddict-item]
    async with backend.pool.connection() as conn:
        with pytest.raises(TypeError, match="pool"):
            MemoryStore(conn, index=backend.store.index_config)
