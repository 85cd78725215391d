"""Every write keeps a memory within its model's limits, whoever builds the value: merges that grow
a list, dates added after the extraction was checked, a due date moved again and again, a model's
oversized summary, a client's write through the store API. Each was found over its limit in the
database by a review of the writes (stop 62)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage

import prompts
from app.studio.store_writes import checked_put
from memory.writer.edits import InvalidClientItem
from core.context import Context
from core.namespaces import PROFILE_KEY, facts_ns, profile_ns
from core.schemas import MAX_SOURCES, SUMMARY_CHARS, TAGS_MAX, SummaryBoard
from core.text_validation import LIST_ITEMS, TEXT_CHARS
from graph.assembly import compile_graph
from memory.user_memory import get_chat, get_user_document, list_facts, stored_tasks
from memory.writer.edits import edit_task, put_client_item
from tests.support.graph_turns import chat_on, new_thread
from tests.support.scripted_model import empty_extraction, registered_scripted_model

pytestmark = pytest.mark.slow  # several turns each


def turn(text: str) -> dict:
    return {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}


def answering(extract, summary: str = "notes") -> callable:
    def respond(kind, messages):
        if kind == "extract":
            return {**empty_extraction(), **extract(prompts.between(str(messages[-1].content), prompts.USER_MESSAGE_TAG))}
        if kind == "title":
            return {"title": "Notes"}
        if kind == "fold":
            return {"summary": summary}
        return "Noted."

    return respond


async def test_goals_and_notes_said_over_many_turns_keep_the_newest_fifty(backend, user_id):
    graph, ctx, config = compile_graph(backend.checkpointer, backend.store), Context(user_id=user_id, model="offline"), new_thread()
    for batch in range(2):
        await graph.ainvoke(turn(" ".join(f"I am learning topic number {batch * 30 + i}." for i in range(30))), config, context=ctx)
        await graph.ainvoke(turn(" ".join(f"I prefer green tea number {batch * 30 + i}." for i in range(30))), config, context=ctx)
    doc = await get_user_document(backend.store, user_id)
    assert len(doc.profile.goals) == LIST_ITEMS and doc.profile.goals[-1].endswith("topic number 59")
    assert len(doc.preferences.other_notes) == LIST_ITEMS and doc.preferences.other_notes[-1].endswith("number 59")


async def test_a_fact_merged_with_a_near_duplicate_keeps_at_most_twenty_tags(backend, user_id):
    said = {"I like green tea": ("Likes green tea", [f"a{i}" for i in range(19)] + ["b0"]),
            "I like green tea very much": ("Likes green tea very much", [f"b{i}" for i in range(20)])}
    with registered_scripted_model(answering(lambda msg: {"new_facts": [{"text": said[msg][0], "tags": said[msg][1]}]})) as (name, _):
        graph, ctx, config = compile_graph(backend.checkpointer, backend.store), Context(user_id=user_id, model=name), new_thread()
        for text in said:
            await graph.ainvoke(turn(text), config, context=ctx)
    [fact] = await list_facts(backend.store, user_id)  # merged: one fact
    assert fact.text == "Likes green tea very much" and len(fact.tags) == TAGS_MAX and "a0" in fact.tags
    assert len(set(fact.tags)) == TAGS_MAX  # a tag both had is kept once


async def test_a_fact_whose_date_would_take_it_past_the_limit_is_kept_without_it(backend, user_id):
    """ "… next Tuesday" got " (2026-12-08)" after the extraction was checked: 2,006 characters, and
    the turn's extract_memories raised."""
    ending = " and starts one next Tuesday"
    text = ("Enjoys old science fiction novels about distant planets " * 40)[: TEXT_CHARS - 5 - len(ending)] + ending
    assert len(text) == TEXT_CHARS - 5
    with registered_scripted_model(answering(lambda msg: {"new_facts": [{"text": msg}]})) as (name, _):
        graph, config = compile_graph(backend.checkpointer, backend.store), new_thread()
        out = await graph.ainvoke(turn(text), config, context=Context(user_id=user_id, model=name))
    assert out["error"] is None
    assert [f.text for f in await list_facts(backend.store, user_id)] == [text]


async def test_a_long_task_moved_again_and_again_stays_within_its_limit_and_says_its_date_once(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke(turn("Remind me to call the dentist tomorrow."), new_thread(), context=Context(user_id=user_id, model="offline"))
    [task] = await stored_tasks(backend.store, user_id)
    long_text = (task.description + " - " + "bring the insurance forms and the x-rays " * 60)[:1990].rstrip()
    task = await edit_task(backend.store, user_id, task.id, {"description": long_text})
    for due in ["tomorrow morning", "next Friday evening"] * 3:
        task = await edit_task(backend.store, user_id, task.id, {"due": due})
        assert len(task.description) <= TEXT_CHARS and task.description.count(" in the ") <= 1
    [stored] = await stored_tasks(backend.store, user_id)
    assert stored.description == task.description and stored.due == "next Friday evening"

    short = await edit_task(backend.store, user_id, task.id, {"description": "Call the dentist on Fri 11 Dec 2026 in the evening"})
    for due in ["tomorrow morning", "next Friday evening"] * 3:
        short = await edit_task(backend.store, user_id, task.id, {"due": due})
    assert short.description.startswith("Call the dentist on ") and short.description.endswith("in the evening")
    assert short.description.count(" on ") == 1 and short.description.count(" in the ") == 1


async def test_a_models_oversized_summary_is_stored_within_the_chats_limit(backend, user_id):
    board = " ".join(f"word{i}" for i in range(5000))  # ~39,000 characters, from the fold and its recompression
    with registered_scripted_model(answering(lambda msg: {}, summary=board)) as (name, _):
        graph, config = compile_graph(backend.checkpointer, backend.store), new_thread()
        ctx = Context(user_id=user_id, model=name, summary_window=4, tail_size=2)
        for i in range(4):
            await graph.ainvoke(turn(f"Message {i} about my garden"), config, context=ctx)
    chat = await get_chat(backend.store, user_id, config["configurable"]["thread_id"])
    assert chat.summary_text and len(chat.summary_text) <= SUMMARY_CHARS
    # The thread's own board too: it was stored whole in every later checkpoint (the prompt trimmed it).
    stored = (await graph.aget_state(config)).values["summary"]
    assert 0 < len(SummaryBoard.model_validate(stored).render()) <= SUMMARY_CHARS and len(stored["summary"]) <= SUMMARY_CHARS
    assert stored["summary"].startswith("word0 word1 ") and stored["summary"].endswith("…")


async def test_a_summary_board_written_past_its_limit_by_a_state_edit_is_kept_cut_to_it(backend, user_id):
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke(turn("My name is Ana."), config, context=ctx)
    huge = {"summary": "Ana likes tea. " * 3000, "key_facts": [f"fact {i}" for i in range(4000)], "topics": ["tea"]}
    await graph.aupdate_state(config, {"summary": huge})

    stored = SummaryBoard.model_validate((await graph.aget_state(config)).values["summary"])
    assert len(stored.render()) <= SUMMARY_CHARS
    assert stored.summary.startswith("Ana likes tea.") and stored.key_facts[:2] == ["fact 0", "fact 1"] and stored.topics == ["tea"]
    out = await graph.ainvoke(turn("What do I like?"), config, context=ctx)
    assert out["messages"][-1].content.startswith("(offline model)")


def test_a_board_is_cut_at_a_word_keeping_whole_items_in_order_and_a_small_one_is_untouched():
    small = SummaryBoard(summary="Ana likes tea.", key_facts=["Lives in Haifa"])
    assert small.render() == "Ana likes tea.\nKey facts: Lives in Haifa"
    cut = SummaryBoard(summary="one two three " * 2000, key_facts=["x" * 15000, "Lives in Haifa"], entities=["Ana"])
    assert len(cut.render()) <= SUMMARY_CHARS
    assert cut.summary.endswith("three…") or cut.summary.endswith("two…") or cut.summary.endswith("one…")
    assert cut.key_facts == ["Lives in Haifa"] and cut.entities == ["Ana"]  # an item too long for the room is left out whole


def test_a_clients_write_through_the_store_api_is_refused_past_the_sources_limits(user_id):
    fact_id = str(uuid.uuid4())
    many = [{"by": "client", "message_id": f"m{i}", "thread_id": "t"} for i in range(MAX_SOURCES + 1)]
    with pytest.raises(InvalidClientItem, match="limit is 20"):
        checked_put(facts_ns(user_id), fact_id, {"id": fact_id, "text": "Plays the cello", "sources": many})
    with pytest.raises(InvalidClientItem, match="keyed by a field"):
        checked_put(profile_ns(user_id), PROFILE_KEY, {"sources": {"k" * 1000: []}})
    checked_put(facts_ns(user_id), fact_id, {"id": fact_id, "text": "Plays the cello", "sources": many[:MAX_SOURCES]})
    checked_put(profile_ns(user_id), PROFILE_KEY, {"sources": {"profile.role": many[:2]}})


async def test_the_writer_refuses_a_clients_item_past_its_limits_whoever_calls_it(backend, user_id):
    # put_client_item trusted the store API's check (app/studio/store_writes.py) and read the value
    # as stored data, whose limits are lenient: a Python caller stored a 20,000-character fact.
    fact_id, task_id = str(uuid.uuid4()), str(uuid.uuid4())
    refused = [
        ("facts", fact_id, {"id": fact_id, "text": "Plays the cello " * 1250}),
        ("facts", fact_id, {"id": fact_id, "text": "Plays the cello", "tags": [f"t{i}" for i in range(TAGS_MAX + 1)]}),
        ("facts", fact_id, {"id": "another-id", "text": "Plays the cello"}),
        ("facts", fact_id, {"id": fact_id, "text": "Plays the\x00 cello"}),
        ("tasks", task_id, {"id": task_id, "description": "   "}),
        ("profile", PROFILE_KEY, {"profile": {"goals": ["ski"] * (LIST_ITEMS + 1)}}),
    ]
    for kind, key, value in refused:
        with pytest.raises(InvalidClientItem):
            await put_client_item(backend.store, user_id, kind, key, value)
    assert await list_facts(backend.store, user_id) == [] and await stored_tasks(backend.store, user_id) == []
    assert await put_client_item(backend.store, user_id, "facts", fact_id, {"id": fact_id, "text": "Plays the cello"}) == fact_id
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Plays the cello"]
