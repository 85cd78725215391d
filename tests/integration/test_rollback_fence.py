"""Taking a turn back fences the chat's checkpoints; the fence must never outlive the take-back.

A failed rollback (or a caller that never reopens) once left a fence with no expiry, and
every later checkpoint of that chat was silently dropped in that process.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

import app.runs.turn_runner as turn_runner
import storage.fenced_saver as fenced_saver
from app.runs.active_runs import ActiveRuns
from app.runs.turn_runner import TurnSpec
from core.context import Context
from graph.assembly import compile_graph
from llm.chat_model import register_model, unregister_model
from storage.fenced_saver import FencedPostgresSaver
from tests.support.scripted_model import ScriptedChatModel, empty_extraction, plain_answers
from prompts.reply_prompt import user_words

FAIL_CUE = "[fail]"


def reply_to(messages):
    said = user_words(next(m for m in reversed(messages) if isinstance(m, HumanMessage)))
    if FAIL_CUE in said:
        raise RuntimeError("the provider failed mid-reply")
    return f"Reply to: {said}"


responder = plain_answers(extract=lambda _: empty_extraction(), title="Fence test", summary="A test chat.", reply=reply_to)


@pytest.fixture
def scripted(monkeypatch):
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=responder))
    monkeypatch.setenv("MEMORY_AGENT_MODEL", name)  # the turn runner's Context takes its model from here
    yield name
    unregister_model(name)


@pytest.fixture
async def runs(backend):
    graph = compile_graph(FencedPostgresSaver(backend.pool), backend.store)
    yield ActiveRuns(graph, backend.pool)


async def run_turn(runs: ActiveRuns, thread_id: str, user_id: str, text: str) -> list[tuple[str, dict]]:
    run_id = await runs.claim_run_slot(thread_id, user_id, "message")
    spec = TurnSpec(thread_id, user_id, "assistant", "message", {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, user_text=text)
    handle = runs.launch(run_id, spec)
    events = await handle.collect()
    await handle.task  # its bookkeeping too (the stream ends before the run's row is final)
    return events


async def saved_messages(runs: ActiveRuns, thread_id: str) -> list:
    """The chat's messages as its latest stored checkpoint has them."""
    state = await runs.graph.aget_state({"configurable": {"thread_id": thread_id}})
    return list(state.values.get("messages") or [])


@pytest.mark.slow
async def test_a_failed_rollback_lifts_the_fence_and_later_turns_of_the_chat_are_saved(runs, backend, user_id, scripted, monkeypatch):
    thread_id = str(uuid.uuid4())
    first = await run_turn(runs, thread_id, user_id, "hello")
    assert first[-1][0] == "done", first

    real_rollback, attempts = turn_runner.rollback_thread, []

    async def rollback_failing_once(pool, mark):
        attempts.append(mark)
        if len(attempts) == 1:
            raise RuntimeError("rollback failed: the database went away")
        return await real_rollback(pool, mark)

    monkeypatch.setattr(turn_runner, "rollback_thread", rollback_failing_once)
    failed = await run_turn(runs, thread_id, user_id, f"{FAIL_CUE} this reply breaks")
    assert failed[-1][0] == "error" and "rollback failed" in failed[-1][1]["message"], failed
    assert len(attempts) == 1

    later = await run_turn(runs, thread_id, user_id, "are you still there?")
    assert later[-1][0] == "done", later
    messages = await saved_messages(runs, thread_id)
    assert isinstance(messages[-2], HumanMessage) and messages[-2].content == "are you still there?"
    assert isinstance(messages[-1], AIMessage) and messages[-1].content == "Reply to: are you still there?"


@pytest.mark.slow
async def test_a_fence_that_is_never_reopened_expires(backend, user_id, monkeypatch):
    saver = FencedPostgresSaver(backend.pool)
    graph = compile_graph(saver, backend.store)
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    ctx = Context(user_id=user_id, model="offline")
    await graph.ainvoke({"messages": [HumanMessage("first")]}, config, context=ctx)
    head = (await graph.aget_state(config)).config["configurable"]["checkpoint_id"]

    await saver.close_thread(config["configurable"]["thread_id"], head)  # and no reopen_thread, as after a crash mid-way
    await graph.ainvoke({"messages": [HumanMessage("while fenced")]}, config, context=ctx)
    assert [m.content for m in await saved_texts(graph, config)] == ["first"], "the closed fence drops checkpoints"

    now = fenced_saver._clock()
    monkeypatch.setattr(fenced_saver, "_clock", lambda: now + fenced_saver.CLOSED_FENCE_SECONDS + 1)
    await graph.ainvoke({"messages": [HumanMessage("after expiry")]}, config, context=ctx)
    assert "after expiry" in [m.content for m in await saved_texts(graph, config)]


async def saved_texts(graph, config) -> list:
    state = await graph.aget_state(config)
    return [m for m in state.values.get("messages") or [] if isinstance(m, HumanMessage)]
