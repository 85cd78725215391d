"""A task's relative due date is stored as the date it meant when said, beside the user's words, and shown as both."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage

from app.cli.memory_report import memory_snapshot, render_snapshot
from core.context import Context
from core.messages import stamp_sent_at
from graph.assembly import compile_graph
from memory.writer.edits import edit_task
from memory.recall import load_user_context
from memory.user_memory import get_user_document, stored_tasks
from prompts.reply_prompt import render_user_context
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model

WEDNESDAY = datetime(2026, 11, 25, 9, 30, tzinfo=timezone.utc)
THURSDAY = datetime(2026, 11, 26, 10, 0, tzinfo=timezone.utc)


def said_on_wednesday(text: str) -> HumanMessage:
    return stamp_sent_at(HumanMessage(text), WEDNESDAY)


def new_thread() -> dict:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


async def test_the_offline_model_stores_next_tuesday_as_the_date_it_meant_on_the_day_it_was_said(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [said_on_wednesday("Remind me to book the dentist next Tuesday.")]}, new_thread(), context=Context(user_id=user_id, model="offline"))

    (task,) = await stored_tasks(backend.store, user_id)
    assert (task.due, task.due_date) == ("next Tuesday", "2026-12-01")  # not the Tuesday after the day the test runs
    assert "(open, due Tue 1 Dec 2026)" in render_snapshot(await memory_snapshot(backend.store, user_id))
    loaded = await load_user_context(backend.store, user_id, "dentist")
    assert "due Tue 1 Dec 2026" in render_user_context(loaded)


@pytest.fixture
def scripted():
    answer = {**empty_extraction(), "task_updates": [{"action": "add", "description": "Renew passport", "due": "next month"}]}
    with registered_scripted_model(plain_answers(extract=lambda said: answer, title="Passport", summary="A reminder.", reply="Noted.")) as scripted:
        yield scripted


async def test_a_models_due_words_are_stored_with_the_date_they_meant_and_the_rules_add_no_twin(backend, user_id, scripted):
    name, _ = scripted
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [said_on_wednesday("Remind me to renew my passport next month.")]}, new_thread(), context=Context(user_id=user_id, model=name))

    (task,) = await stored_tasks(backend.store, user_id)
    assert (task.description, task.due, task.due_date) == ("Renew passport in December 2026", "next month", "2026-12")


@pytest.mark.slow
async def test_a_due_date_the_user_edits_means_a_date_from_the_edit(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [said_on_wednesday("Remind me to call mom tomorrow.")]}, new_thread(), context=Context(user_id=user_id, model="offline"))
    (task,) = await stored_tasks(backend.store, user_id)
    assert task.due_date == "2026-11-26"

    assert task.description == "Call mom on Thu 26 Nov 2026"

    edited = await edit_task(backend.store, user_id, task.id, {"due": "January 15, 2027"})
    assert (edited.due, edited.due_date) == ("January 15, 2027", "2027-01-15")
    assert edited.description == "Call mom on Fri 15 Jan 2027"  # the text says the new date, not the old one
    cleared = await edit_task(backend.store, user_id, task.id, {"due": None})
    assert (cleared.due, cleared.due_date) == (None, None)


@pytest.mark.slow
async def test_remind_me_next_friday_said_on_a_thursday_stores_the_friday_of_next_week_in_the_tasks_text_and_due_date(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    said = stamp_sent_at(HumanMessage("remind me to call the dentist next Friday"), THURSDAY)
    out = await graph.ainvoke({"messages": [said]}, new_thread(), context=Context(user_id=user_id, model="offline"))

    (task,) = await stored_tasks(backend.store, user_id)
    assert (task.description, task.due, task.due_date) == ("Call the dentist on Fri 4 Dec 2026", "next Friday", "2026-12-04")
    assert [s.by for s in task.sources] == ["rules"]  # the dated text is still known as the rules' own
    assert "Fri 4 Dec 2026" in out["memory_written"]["described"]  # the "remembered:" line states the date it took


@pytest.mark.slow
async def test_no_emojis_please_is_stored_as_a_preference(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [said_on_wednesday("no emojis please")]}, new_thread(), context=Context(user_id=user_id, model="offline"))
    await graph.ainvoke({"messages": [said_on_wednesday("Short replies please.")]}, new_thread(), context=Context(user_id=user_id, model="offline"))

    preferences = (await get_user_document(backend.store, user_id)).preferences
    assert preferences.other_notes == ["No emojis"]
    assert preferences.answer_length == "short"


async def test_a_task_moved_to_another_day_says_the_new_date_in_its_text(backend, user_id):
    from core.schemas import ExtractionResult, TaskUpdate
    from memory.writer.extraction import apply_extraction

    said = "Call the dentist on Fri 4 Dec 2026"
    await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[TaskUpdate(action="add", description=said, due="next Friday", due_date="2026-12-04")]))
    (task,) = await stored_tasks(backend.store, user_id)
    moved = TaskUpdate(action="update", description="call the dentist", task_id=task.id, due="Monday", due_date="2026-11-30")
    report = await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[moved]))

    (task,) = await stored_tasks(backend.store, user_id)
    assert (task.description, task.due_date) == ("Call the dentist on Mon 30 Nov 2026", "2026-11-30")
    assert report.tasks_updated == ["Call the dentist on Mon 30 Nov 2026"]


async def test_the_same_reminder_for_another_day_is_a_second_task_not_dropped_as_a_duplicate(backend, user_id):
    graph, ctx, config = compile_graph(backend.checkpointer, backend.store), Context(user_id=user_id, model="offline"), new_thread()
    await graph.ainvoke({"messages": [said_on_wednesday("Remind me to call the dentist next Friday.")]}, config, context=ctx)
    out = await graph.ainvoke({"messages": [said_on_wednesday("Remind me to call the dentist on Monday.")]}, config, context=ctx)

    tasks = await stored_tasks(backend.store, user_id)
    assert sorted(t.due_date for t in tasks) == ["2026-11-30", "2026-12-04"]
    assert out["memory_written"]["tasks_added"] == ["Call the dentist on Mon 30 Nov 2026"]
    # Said again for the same day, it is the task already on the list.
    await graph.ainvoke({"messages": [said_on_wednesday("Remind me to call the dentist on Monday.")]}, config, context=ctx)
    assert len(await stored_tasks(backend.store, user_id)) == 2
