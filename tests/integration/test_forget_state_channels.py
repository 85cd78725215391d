"""The channels of a chat's state drawn from memory (the summary board, what the turn loaded, what
it wrote) keep nothing the user had forgotten or deleted: not in the head a forget leaves, not after
a fork from a checkpoint older than the forget, not after a turn that loaded its state before it,
and not in what the chat's detail shows (real Postgres, the offline model)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from app.http.routes_chats import chat_detail, checkpoint_before, question_of
from app.http.services import Services
from app.runs.active_runs import ActiveRuns
from core.context import Context
from core.schemas import SummaryBoard
from core.state import LAST_NODE
from graph.assembly import compile_graph
from llm.chat_model import register_model, unregister_model
from memory.chat_admin import delete_message_everywhere
from memory.forgetting import forget_request
from memory.user_memory import get_chat, stored_tasks
from tests.integration.test_resume_take_back import turns  # noqa: F401 - a fixture: turns through TurnRunner
from tests.support.scripted_model import ScriptedChatModel, empty_extraction

NURSE = "My name is Rosa, I live in Coimbra and I work as a nurse"
LATER = ["I like tea", "I like long walks", "I play the cello", "I read novels"]


def config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


async def say(graph, thread_id: str, text: str, ctx: Context) -> None:
    await graph.ainvoke({"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, config(thread_id), context=ctx)


async def drawn_from_memory(graph, thread_id: str) -> str:
    """The head state's channels other than the transcript, as JSON (what Studio shows of them)."""
    values = (await graph.aget_state(config(thread_id))).values
    return json.dumps({k: v for k, v in values.items() if k != "messages"}, default=str)


def board_of(values: dict) -> str:
    return SummaryBoard.model_validate(values.get("summary") or {}).render()


@pytest.mark.slow  # turns of several chats
async def test_a_forget_leaves_nothing_forgotten_in_the_head_state_of_any_of_the_users_chats(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    told, asked = str(uuid.uuid4()), str(uuid.uuid4())
    await say(graph, told, NURSE, ctx)
    await say(graph, asked, "What do you know about me?", ctx)  # loads the profile and the fact into this chat's state
    assert "nurse" in await drawn_from_memory(graph, told) and "nurse" in await drawn_from_memory(graph, asked)

    assert await forget_request(backend.store, user_id, "nurse")

    for thread_id in (told, asked):
        state = await drawn_from_memory(graph, thread_id)
        assert "nurse" not in state.lower()
    assert "Coimbra" in await drawn_from_memory(graph, asked)  # what was not forgotten stays
    assert "nurse" in (await graph.aget_state(config(told))).values["messages"][0].text  # the transcript is kept as written


@pytest.mark.slow  # turns of several chats
async def test_deleting_a_message_leaves_nothing_of_it_in_the_state_of_the_users_other_chats(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    told, asked = str(uuid.uuid4()), str(uuid.uuid4())
    await say(graph, told, "My passport number is K4477123 and it expires soon", ctx)
    await say(graph, told, "The van is booked for the move", ctx)
    await say(graph, asked, "What was my passport number again?", ctx)
    assert "K4477123" in await drawn_from_memory(graph, asked)
    secret = next(m for m in (await graph.aget_state(config(told))).values["messages"] if "K4477123" in m.text)

    await delete_message_everywhere(backend, graph, user_id, told, secret)

    assert "K4477123" not in await drawn_from_memory(graph, asked)
    assert "K4477123" not in await drawn_from_memory(graph, told)


@pytest.mark.slow  # a chat long enough to fold
async def test_regenerating_a_reply_after_a_forget_does_not_bring_the_forgotten_words_back_into_the_summary(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline", summary_window=4, tail_size=2)
    thread_id = str(uuid.uuid4())
    for text in [NURSE, *LATER, "I bake bread"]:
        await say(graph, thread_id, text, ctx)
    assert "nurse" in board_of((await graph.aget_state(config(thread_id))).values)
    assert await forget_request(backend.store, user_id, "nurse")

    # POST /chats/{id}/messages/{reply}/regenerate: the route's fork, from a checkpoint older than the forget
    values = (await graph.aget_state(config(thread_id))).values
    reply = [m for m in values["messages"] if isinstance(m, AIMessage)][-1]
    question = await question_of(graph, thread_id, reply.id)
    await graph.ainvoke({"messages": [question]}, await checkpoint_before(graph, thread_id, question.id), context=ctx)

    board = board_of((await graph.aget_state(config(thread_id))).values)
    assert "nurse" not in board and "Coimbra" in board
    assert "nurse" not in (await drawn_from_memory(graph, thread_id)).lower()


@pytest.mark.slow  # a chat long enough to fold
async def test_a_forget_while_a_turn_runs_reaches_the_state_the_turn_leaves(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline", summary_window=4, tail_size=2)
    thread_id = str(uuid.uuid4())
    for text in [NURSE, *LATER]:
        await say(graph, thread_id, text, ctx)
    assert "nurse" in board_of((await graph.aget_state(config(thread_id))).values)

    # The turn loads its state, then the forget commits (from another tab) while the reply streams.
    slow = Context(user_id=user_id, model="offline-slow:40", summary_window=4, tail_size=2)
    message = {"messages": [HumanMessage("Tell me a long story about my garden and the weather today please", id=str(uuid.uuid4()))]}
    forgot = False
    async for chunk, meta in graph.astream(message, config(thread_id), context=slow, stream_mode="messages"):
        if not forgot and meta.get("langgraph_node") == "reply" and chunk.content:
            assert await forget_request(backend.store, user_id, "nurse")
            forgot = True
    assert forgot

    values = (await graph.aget_state(config(thread_id))).values
    assert "nurse" not in board_of(values) and "Coimbra" in board_of(values)
    assert "nurse" not in (await drawn_from_memory(graph, thread_id)).lower()


async def test_the_chat_detail_shows_the_summary_without_what_was_forgotten_whatever_wrote_the_state(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    thread_id = str(uuid.uuid4())
    await say(graph, thread_id, NURSE, ctx)
    assert await forget_request(backend.store, user_id, "nurse")
    # A state written past every node (Studio's state editor, say) with the forgotten words in its board.
    board = SummaryBoard(summary="Rosa works as a nurse in Coimbra.", key_facts=["Works as a nurse", "Lives in Coimbra"])
    await graph.aupdate_state(config(thread_id), {"summary": board.model_dump(mode="json")}, as_node=LAST_NODE)

    services = Services(backend, graph, ActiveRuns(graph, backend.pool), auth_enabled=False, max_message_chars=10_000)
    detail = await chat_detail(services, await get_chat(backend.store, user_id, thread_id), user_id)

    shown = detail.summary.model_dump_json() + detail.model_view.summary
    assert "nurse" not in shown and "Coimbra" in shown
    assert any(m.forgotten for m in detail.messages)  # the transcript as written, marked


def adding_a_task(kind, messages):
    """A model that asks to add a task (the run waits for the user's yes), then answers."""
    if kind == "reply":
        if isinstance(messages[-1], ToolMessage):
            return "Okay."
        return AIMessage("", tool_calls=[{"name": "add_task", "args": {"description": "Buy milk"}, "id": "call_milk"}])
    return empty_extraction() if kind == "extract" else {"title": "Tasks"} if kind == "title" else {"summary": ""}


@pytest.mark.slow  # two turns
async def test_a_forget_redacts_the_state_of_a_chat_waiting_for_a_confirmation_and_keeps_its_question(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    waiting = str(uuid.uuid4())
    await say(graph, waiting, NURSE, Context(user_id=user_id, model="offline"))
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=adding_a_task))
    try:
        ctx = Context(user_id=user_id, model=name)
        await say(graph, waiting, "Remind me to buy milk", ctx)
        (question,) = (await graph.aget_state(config(waiting))).interrupts
        assert "nurse" in await drawn_from_memory(graph, waiting)  # the profile loaded for the turn

        assert await forget_request(backend.store, user_id, "nurse")

        state = await graph.aget_state(config(waiting))
        assert "nurse" not in await drawn_from_memory(graph, waiting)
        assert [i.id for i in state.interrupts] == [question.id]  # still asked: the head was rewritten in place
        await graph.ainvoke(Command(resume={"approved": True}), config(waiting), context=ctx)
        assert [t.description for t in await stored_tasks(backend.store, user_id)] == ["Buy milk"]
    finally:
        unregister_model(name)


@pytest.mark.slow
async def test_an_ordinary_turn_takes_the_users_write_lock_twice_at_most(backend, user_id, turns, monkeypatch):
    """The state's redaction read the ledger under the user's lock in summarize and again in
    extract_memories: three lock transactions in a turn that wrote nothing, and a user's chats'
    memory phases queued behind one another. The last node's read is the one a forget must wait for."""
    import storage.user_transaction as user_transaction

    def plain(kind, messages):
        if kind == "reply":
            return "Sure, Lisbon is lovely in spring."
        if kind == "extract":
            return empty_extraction()
        return {"title": "Trips"} if kind == "title" else {"summary": ""}

    _, _, turn = turns(plain)
    await turn("I am thinking about a trip")
    taken = 0
    lock_key = user_transaction.lock_key

    def counted(user: str):
        nonlocal taken
        taken += 1
        return lock_key(user)

    monkeypatch.setattr(user_transaction, "lock_key", counted)
    _, status, _ = await turn("What about Lisbon?")
    assert status == "finished" and 0 < taken <= 2  # the chat's record, and the last node's ledger read


@pytest.mark.slow  # two turns
async def test_a_forget_committed_while_a_run_goes_to_a_confirmation_leaves_nothing_forgotten_in_its_head(backend, user_id):
    from app.runs.turn_runner import TurnRunner, TurnSpec
    from storage import chat_runs

    graph = compile_graph(backend.checkpointer, backend.store)
    thread_id = str(uuid.uuid4())
    await say(graph, thread_id, NURSE, Context(user_id=user_id, model="offline"))
    loop = asyncio.get_running_loop()
    forgot: list[bool] = []

    def forgetting_then_adding(kind, messages):
        # The run loaded its state (the profile, the fact); the forget commits from another tab
        # while the model answers, before the run writes the checkpoint of its confirmation.
        if kind == "reply" and not isinstance(messages[-1], ToolMessage) and not forgot:
            forgot.append(bool(asyncio.run_coroutine_threadsafe(forget_request(backend.store, user_id, "nurse"), loop).result(60)))
        return adding_a_task(kind, messages)

    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=forgetting_then_adding))
    try:
        run_id = await chat_runs.start_run(backend.pool, thread_id, user_id, "message", "test-worker")
        message = {"messages": [HumanMessage("Remind me to buy milk", id=str(uuid.uuid4()))]}
        events: list[tuple[str, dict]] = []
        spec = TurnSpec(thread_id, user_id, "assistant", "message", message, context={"model": name})
        runner = TurnRunner(graph=graph, pool=backend.pool, run_id=run_id, spec=spec, emit=lambda e, d: events.append((e, d)))
        assert await runner.run() == "interrupted" and forgot == [True]
    finally:
        unregister_model(name)

    state = await graph.aget_state(config(thread_id))
    assert len(state.interrupts) == 1  # the question stays asked
    assert "nurse" not in (await drawn_from_memory(graph, thread_id)).lower()
    assert "Coimbra" in await drawn_from_memory(graph, thread_id)  # what was not forgotten stays
