"""The state's contracts (core.contracts) are what the builders really produce: a turn of the real
graph on Postgres fills loaded_context and retrieved_chunks with exactly the TypedDicts' keys, and
they come back from the checkpointer as the plain dicts they were written as."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import knowledge
from core.context import Context
from core.contracts import Chunk, Excerpt, ExcerptLine, LoadedContext, RankedFact, RelatedChat, TaskLine
from core.schemas import ChatRecord, ExtractionResult, NewFact, TaskUpdate
from graph.assembly import compile_graph
from memory.writer.extraction import apply_extraction
from memory.writer.records import save_chat_record
from storage import thread_owners
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model

TRIP = "For the Lisbon trip I booked a hotel in Alfama and a day trip to Sintra."
ASKED = "Lisbon trip: which hotel in Alfama, and when is the day trip to Sintra?"


def keys(typed) -> set[str]:
    return set(typed.__annotations__)


def assert_shaped(items: list, typed) -> None:
    assert items, f"nothing to check against {typed.__name__}"
    for item in items:
        assert type(item) is dict and set(item) == keys(typed), (typed.__name__, item)


@pytest.mark.slow
async def test_a_turn_loads_exactly_the_loaded_context_keys_and_the_checkpoint_gives_them_back(backend, user_id):
    await apply_extraction(
        backend.store, user_id,
        ExtractionResult(new_facts=[NewFact(text="Is planning a trip to Lisbon")], task_updates=[TaskUpdate(action="add", description="Book the Sintra day trip")]),
    )
    lisbon = str(uuid.uuid4())
    await thread_owners.create(backend.pool, lisbon, user_id)
    await save_chat_record(
        backend.store, user_id,
        ChatRecord(thread_id=lisbon, title="Lisbon trip", summary_text="Planning a week in Lisbon: flights, a hotel in Alfama, and a day trip to Sintra."),
    )
    with registered_scripted_model(plain_answers(extract=lambda _t: empty_extraction(), title="Trip", summary="Talked.", reply="Noted.")) as (name, _):
        graph = compile_graph(backend.checkpointer, backend.store)
        await stream_turn(graph, TRIP, new_thread(), Context(user_id=user_id, model=name))
        config = new_thread()
        await stream_turn(graph, ASKED, config, Context(user_id=user_id, model=name))

    # Read back from the Postgres checkpointer: TypedDicts serialize as the dicts they are.
    loaded = (await graph.aget_state(config)).values["loaded_context"]
    assert type(loaded) is dict and set(loaded) == keys(LoadedContext)
    assert_shaped(loaded["facts"], RankedFact)
    assert_shaped(loaded["tasks"], TaskLine)
    assert_shaped(loaded["related_chats"], RelatedChat)
    assert_shaped(loaded["excerpts"], Excerpt)
    assert_shaped([line for e in loaded["excerpts"] for line in e["lines"]], ExcerptLine)
    assert TRIP in [line["text"] for e in loaded["excerpts"] for line in e["lines"]]


@pytest.mark.slow
async def test_retrieve_keeps_exactly_the_chunk_keys_in_the_checkpoint(backend, user_id):
    collection = f"kb-{uuid.uuid4().hex[:8]}"
    report = await knowledge.ingest(backend.pool, backend.embeddings.embeddings, [Path(__file__).parents[1] / "fixtures" / "kb"], collection)
    assert report.ok, report.summary()
    with registered_scripted_model(plain_answers(extract=lambda _t: empty_extraction(), title="Hub", summary="Talked.", reply="Noted.")) as (name, _):
        graph = compile_graph(backend.checkpointer, backend.store)
        config = new_thread()
        await stream_turn(graph, "The hub's status light stays dark and it won't turn on", config, Context(user_id=user_id, model=name, rag_collection=collection))
    assert_shaped((await graph.aget_state(config)).values["retrieved_chunks"], Chunk)
