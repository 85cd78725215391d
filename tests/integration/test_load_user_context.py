"""What load_context puts in a turn, read from a real Postgres: profile, ranked facts, tasks, related chats.

The reads overlap (they run concurrently to keep the time before the first token short); these
tests pin the selection rules so that concurrency never changes what is chosen.
"""

from __future__ import annotations

import uuid

from core.context import Context
from core.schemas import ChatRecord, ExtractionResult, NewFact, ProfileUpdates, TaskUpdate
from memory.writer.extraction import apply_extraction
from memory.writer.records import save_chat_record
from storage import thread_owners
from memory.recall import load_user_context
from memory.user_memory import list_facts
from graph.assembly import compile_graph
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model


async def tell(backend, user_id: str, **fields) -> None:
    await apply_extraction(backend.store, user_id, ExtractionResult(**fields))


async def test_profile_and_the_facts_nearest_the_message_are_loaded_and_loading_writes_nothing(backend, user_id):
    await tell(
        backend,
        user_id,
        profile_updates=ProfileUpdates(name="Dana"),
        new_facts=[NewFact(text="Has a dog named Rex"), NewFact(text="Works as a nurse"), NewFact(text="Is learning Italian at level A2")],
    )
    loaded = await load_user_context(backend.store, user_id, "How should I walk my dog in the rain?")
    assert loaded["profile"]["name"] == "Dana"
    assert loaded["facts"][0]["text"] == "Has a dog named Rex"
    # Before the first token nothing is written: the turn marks them used after the reply.
    assert all(f.last_used is None for f in await list_facts(backend.store, user_id))


async def test_the_facts_a_turn_recalled_are_marked_used_after_its_reply(backend, user_id):
    await tell(backend, user_id, new_facts=[NewFact(text="Has a dog named Rex"), NewFact(text="Works as a nurse"), NewFact(text="Is learning Italian at level A2")])
    with registered_scripted_model(plain_answers(extract=lambda _text: empty_extraction(), title="Dogs", summary="Talked.", reply="Walk him early.")) as (name, _):
        graph = compile_graph(backend.checkpointer, backend.store)
        turn = await stream_turn(graph, "How should I walk my dog in the rain?", new_thread(), Context(user_id=user_id, model=name))
    recalled = {f["text"] for f in turn.values["loaded_context"]["facts"]}
    used = {f.text for f in await list_facts(backend.store, user_id) if f.last_used is not None}
    assert "Has a dog named Rex" in recalled and used == recalled


async def test_a_few_open_tasks_always_show(backend, user_id):
    await tell(backend, user_id, task_updates=[TaskUpdate(action="add", description="Renew the passport"), TaskUpdate(action="add", description="Buy dog food")])
    loaded = await load_user_context(backend.store, user_id, "Tell me a joke about cats.")
    assert sorted(t["description"] for t in loaded["tasks"]) == ["Buy dog food", "Renew the passport"]


async def test_with_many_open_tasks_only_related_ones_show_unless_the_message_is_about_tasks(backend, user_id):
    descriptions = ["Renew the passport at the consulate", "Buy dog food", "Call the dentist", "Pay the electricity bill", "Book flights to Rome"]
    await tell(backend, user_id, task_updates=[TaskUpdate(action="add", description=d) for d in descriptions])

    related = await load_user_context(backend.store, user_id, "When does my passport expire? I need it renewed.")
    assert [t["description"] for t in related["tasks"]][0] == "Renew the passport at the consulate"
    assert len(related["tasks"]) < len(descriptions)

    about_tasks = await load_user_context(backend.store, user_id, "What is on my todo list?")
    assert sorted(t["description"] for t in about_tasks["tasks"]) == sorted(descriptions)


async def test_a_related_chat_is_offered_but_never_the_current_one(backend, user_id):
    current, other = str(uuid.uuid4()), str(uuid.uuid4())
    summary = "Planning a week in Lisbon: flights, a hotel in Alfama, and a day trip to Sintra."
    for thread in (current, other):
        await thread_owners.create(backend.pool, thread, user_id)
        await save_chat_record(backend.store, user_id, ChatRecord(thread_id=thread, title="Lisbon trip", summary_text=summary))
    loaded = await load_user_context(backend.store, user_id, "Lisbon trip: hotel in Alfama and a day trip to Sintra", thread_id=current)
    assert [c["thread_id"] for c in loaded["related_chats"]] == [other]


async def test_a_user_with_no_memory_gets_empty_sections(backend, user_id):
    loaded = await load_user_context(backend.store, user_id, "hello")
    assert loaded["facts"] == [] and loaded["tasks"] == [] and loaded["related_chats"] == []
