"""What a real small model stores: the four Dana lines through the real graph, and relative due dates.

The model is llama-cpp-python's server with Qwen2.5-Coder (0.5B unless MEMORY_AGENT_LOCAL_MODEL=1.5b).
The assertions are on what reaches Postgres and that no reply is blank, never on the model's wording.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from core.context import Context
from core.messages import stamp_sent_at
from graph.assembly import compile_graph
from memory.user_memory import get_user_document, list_facts, stored_tasks
from tests.support.graph_turns import new_thread, stream_turn

# Four turns of reply + extraction on a busy 2-core machine: minutes, not seconds.
pytestmark = pytest.mark.timeout(1200)

DANA = [
    "Hi! My name is Dana, I live in Haifa and I work as a nurse.",
    "I prefer short answers.",
    "Remind me to renew my passport next month.",
    "What do you know about me?",
]
# Wednesday 25 November 2026, 09:30 UTC: the day each relative date below is said on.
WEDNESDAY = datetime(2026, 11, 25, 9, 30, tzinfo=timezone.utc)


async def test_the_four_dana_lines_store_name_city_job_short_answers_and_the_passport_task_with_no_blank_reply(
    backend, user_id, real_model
):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=real_model, max_reply_tokens=64)  # a few sentences each: the tier stays short
    config = new_thread()
    replies: list[str] = []
    for line in DANA:
        turn = await stream_turn(graph, line, config, ctx)
        while turn.interrupts:  # a task tool asks first; the user says yes
            turn = await stream_turn(graph, Command(resume={"approved": True}), config, ctx)
        replies.append(turn.final_reply.text if turn.final_reply else "")

    doc = await get_user_document(backend.store, user_id)
    facts = [f.text for f in await list_facts(backend.store, user_id)]
    tasks = [t.description for t in await stored_tasks(backend.store, user_id, include_done=False)]
    seen = {"profile": doc.profile.model_dump(exclude_defaults=True), "preferences": doc.preferences.model_dump(exclude_defaults=True),
            "facts": facts, "tasks": tasks, "replies": [r[:80] for r in replies]}  # fmt: skip
    print(seen)  # the tier's log carries what the model stored (the docs quote it)

    assert (doc.profile.name, doc.profile.location) == ("Dana", "Haifa"), seen
    assert "nurse" in (doc.profile.role or "").casefold(), seen
    assert doc.preferences.answer_length == "short", seen
    assert any("passport" in t.casefold() for t in tasks), seen
    # Nothing that contradicts what Dana said: another length, city, name or job in a note or a fact.
    said_otherwise = ("medium", "long answer", "detailed", "lives in tel", "teacher", "doctor", "engineer")
    stored_text = " | ".join([*facts, *doc.preferences.other_notes, *doc.profile.goals]).casefold()
    assert not any(w in stored_text for w in said_otherwise), seen
    # Every reply is an answer: not blank, and not the note that stands in for two empty ones.
    assert all(r.strip() and "gave no usable reply" not in r for r in replies), seen


# Three reminders in one message (one turn keeps the tier short), said on WEDNESDAY.
DATED = [  # (what is said, a word of the task, the date it means)
    ("Remind me to book the dentist next Tuesday.", "dentist", "2026-12-01"),
    ("Remind me to call my mother tomorrow.", "mother", "2026-11-26"),
    ("Remind me to renew my passport next month.", "passport", "2026-12"),
]


async def test_next_tuesday_tomorrow_and_next_month_said_on_a_known_day_are_stored_as_those_dates_by_the_real_model_path(
    backend, user_id, real_model
):
    graph = compile_graph(backend.checkpointer, backend.store)
    # The extraction path, not the task tool's; the reply is not what this test is about, so it is a few tokens.
    ctx = Context(user_id=user_id, model=real_model, tools=False, max_reply_tokens=24)
    said = stamp_sent_at(HumanMessage(" ".join(line for line, _, _ in DATED), id=str(uuid.uuid4())), WEDNESDAY)
    await stream_turn(graph, {"messages": [said]}, new_thread(), ctx)

    tasks = await stored_tasks(backend.store, user_id, include_done=False)
    seen = [t.model_dump(mode="json") for t in tasks]
    for _, key, due_date in DATED:
        assert [t.due_date for t in tasks if key in t.description.casefold()] == [due_date], seen
