"""retrieve: hybrid search (vector + full text, fused, diversified) over the knowledge base."""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime

from core.context import Context, get_context
from core.messages import current_turn
from core.metrics import timed
from core.state import State
import knowledge
from nodes.load_context import check_turn_message
from storage.memory_store import memory_store

log = logging.getLogger(__name__)
_named_empty: set[str] = set()


async def retrieve(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    human, _ = current_turn(state.messages)
    # The knowledge base shares the store's pool and embeddings.
    store = memory_store(runtime.store)
    pool, embeddings = store.pool, store.embeddings
    if human is None:
        return {"retrieved_chunks": []}
    check_turn_message(human, ctx)  # a run started past load_context (a state edit) is checked here
    with timed("retrieve"):
        collection = ctx.rag_collection or None
        if await knowledge.is_empty(pool, collection):
            if collection and collection not in _named_empty and not await knowledge.is_empty(pool):
                _named_empty.add(collection)  # said once a process: a misspelt name otherwise gave no knowledge, silently
                held = sorted((await knowledge.stats(pool))["collections"])
                log.warning("rag_collection %r holds no documents, so no knowledge is searched; the collections are: %s", collection, ", ".join(held))
            return {"retrieved_chunks": []}
        chunks = await knowledge.search(
            pool, embeddings, human.text, collection=collection, k=ctx.rag_top_k, token_budget=ctx.rag_token_budget
        )
    return {"retrieved_chunks": [c.as_chunk() for c in chunks]}
