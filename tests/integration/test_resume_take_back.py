"""A resume that is taken back leaves memory as it was before it: what its approved task tools wrote is undone.

The rule (app.runs.turn_runner, memory.writer.run_undo): a run's tools journal each store write with
the value it replaced, in the run's row and in the write's own transaction; taking the run back (a
stop, a failure, a dead worker's recovery) restores those values, an added task is removed, an
updated or completed one gets its previous value back. The confirmation is then asked again.

The turns run through TurnRunner itself (the path of the HTTP API and the CLI), with a scripted model.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timezone

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from app.runs import turn_runner
from app.runs.turn_runner import STOPPED_DISCARDED, TurnRunner, TurnSpec
from core.context import Context
from core.schemas import ExtractionResult, TaskUpdate
from graph.assembly import compile_graph
from llm.chat_model import register_model, unregister_model
from memory.user_memory import stored_tasks
from memory.writer.extraction import apply_extraction
from storage import chat_runs
from storage.user_transaction import lock_key
from tests.support.scripted_model import ScriptedChatModel, empty_extraction


class ReplyFailed(RuntimeError):
    pass


def calling(call: dict, *, after_tool: str = "reply"):
    """Reply with ``call``; after its result answer (``after_tool="reply"``) or fail (``"fail"``)."""

    def responder(kind, messages):
        if kind == "reply":
            if isinstance(messages[-1], ToolMessage):
                if after_tool == "fail" and "declined" not in str(messages[-1].content):
                    raise ReplyFailed("the model went away")
                return "Okay. " + str(messages[-1].content)
            return AIMessage("", tool_calls=[{**call, "id": f"call_{uuid.uuid4().hex[:6]}"}])
        if kind == "extract":
            return empty_extraction()
        return {"title": "Tasks"} if kind == "title" else {"summary": ""}

    return responder


@pytest.fixture
def turns(backend, user_id):
    """``turn(graph_input, on_token=None)``: one run through TurnRunner on one chat; (runner, status, events)."""
    names: list[str] = []
    graph = compile_graph(backend.checkpointer, backend.store)
    thread_id = str(uuid.uuid4())

    def use(responder):
        name = f"scripted-{uuid.uuid4().hex[:6]}"
        register_model(name, ScriptedChatModel(responder=responder))
        names.append(name)

        async def turn(graph_input, on_token=None, kind: str | None = None):
            kind = kind or ("resume" if isinstance(graph_input, Command) else "message")
            if isinstance(graph_input, str):
                graph_input = {"messages": [HumanMessage(graph_input, id=str(uuid.uuid4()))]}
            run_id = await chat_runs.start_run(backend.pool, thread_id, user_id, kind, "test-worker")
            events: list[tuple[str, dict]] = []
            spec = TurnSpec(thread_id, user_id, "assistant", kind, graph_input, context={"model": name})
            runner: TurnRunner

            def emit(event: str, data: dict) -> None:
                events.append((event, data))
                if event == "token" and on_token is not None:
                    on_token(runner)

            runner = TurnRunner(graph=graph, pool=backend.pool, run_id=run_id, spec=spec, emit=emit)
            status = await runner.run()
            return runner, status, events

        return graph, thread_id, turn

    yield use
    for name in names:
        unregister_model(name)


async def tasks_of(backend, user_id) -> list[tuple[str, str]]:
    return sorted((t.description, t.status) for t in await stored_tasks(backend.store, user_id))


async def given_task(backend, user_id, description: str) -> str:
    await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[TaskUpdate(action="add", description=description)]))
    (task,) = [t for t in await stored_tasks(backend.store, user_id) if t.description == description]
    return task.id


CALLS = {
    "add": {"name": "add_task", "args": {"description": "Repaint the garage door"}},
    "update": {"name": "update_task", "args": {"description": "Clean the gutters", "status": "in_progress", "due": "2031-05-04"}},
    "complete": {"name": "complete_task", "args": {"description": "Clean the gutters"}},
}


async def pending(graph, thread_id) -> int:
    return len((await graph.aget_state({"configurable": {"thread_id": thread_id}})).interrupts)


@pytest.mark.parametrize("action", ["add", "update", "complete"])
async def test_a_stopped_approved_resume_undoes_what_its_tool_wrote_and_a_decline_then_changes_nothing(backend, user_id, turns, action):
    await given_task(backend, user_id, "Clean the gutters")
    before = await tasks_of(backend, user_id)
    raw_before = [t.model_dump() for t in await stored_tasks(backend.store, user_id)]
    graph, thread_id, turn = turns(calling(CALLS[action]))
    assert (await turn("[task] see to the house"))[1] == "interrupted"

    def stop_once_the_tool_wrote(runner):
        runner.stop()

    runner, status, events = await turn(Command(resume={"approved": True}), on_token=stop_once_the_tool_wrote)
    assert status == "stopped"
    assert events[-1] == ("error", {"code": "stopped", "message": STOPPED_DISCARDED, "text": ""})
    # The chat is as it was before: the confirmation is asked again, and memory too is as it was.
    assert await pending(graph, thread_id) == 1
    assert await tasks_of(backend, user_id) == before
    assert [t.model_dump() for t in await stored_tasks(backend.store, user_id)] == raw_before  # every field, dates too

    assert (await turn(Command(resume={"approved": False})))[1] == "finished"
    assert await tasks_of(backend, user_id) == before


async def test_a_failed_approved_resume_undoes_the_task_its_tool_added(backend, user_id, turns):
    graph, thread_id, turn = turns(calling(CALLS["add"], after_tool="fail"))
    await turn("[task] repaint the garage door")
    runner, status, events = await turn(Command(resume={"approved": True}))
    assert status == "failed" and events[-1][1]["code"] == "reply_failed"
    assert await tasks_of(backend, user_id) == []
    assert await pending(graph, thread_id) == 1


async def test_a_dead_workers_approved_resume_is_undone_by_the_worker_that_takes_it_back(backend, user_id, turns):
    graph, thread_id, turn = turns(calling(CALLS["add"]))
    await turn("[task] repaint the garage door")
    # The worker loses the database once the tool wrote: its run stays active, for a live worker to take back.
    runner, _, _ = await turn(Command(resume={"approved": True}), on_token=lambda r: r.abort())
    assert runner.aborted and await tasks_of(backend, user_id) == [("Repaint the garage door", "open")]
    async with backend.pool.connection() as conn:
        await conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s", (runner.run_id,))

    (dead,) = await chat_runs.take_over_stale(backend.pool, "live-worker", thread_id)
    recovering = TurnRunner(graph=graph, pool=backend.pool, run_id=dead.recovery_run_id, spec=TurnSpec.of_abandoned(dead), emit=lambda *_: None)
    assert await recovering.recover(dead) == "stopped"
    assert await tasks_of(backend, user_id) == []
    assert await pending(graph, thread_id) == 1


async def test_a_resume_that_ends_keeps_its_write_and_its_row_no_copy_of_it(backend, user_id, turns):
    graph, thread_id, turn = turns(calling(CALLS["add"]))
    await turn("[task] repaint the garage door")
    runner, status, _ = await turn(Command(resume={"approved": True}))
    assert status == "finished" and await tasks_of(backend, user_id) == [("Repaint the garage door", "open")]
    async with backend.pool.connection() as conn:
        row = await (await conn.execute("SELECT undo FROM memory_agent_runs WHERE run_id = %s", (runner.run_id,))).fetchone()
    assert row["undo"] is None  # the journal held the task's words: gone with the run's other text


# --------------------------------------------------------------------------- the journal itself
async def journaled_run(backend, user_id) -> str:
    return await chat_runs.start_run(backend.pool, str(uuid.uuid4()), user_id, "resume", "test-worker")


async def test_the_take_back_keeps_a_change_someone_else_made_since_the_tool_wrote(backend, user_id):
    from memory.writer.edits import edit_task
    from memory.writer.run_undo import UNDOABLE_RUN, undo_run_writes

    task_id = await given_task(backend, user_id, "Clean the gutters")
    fence = await given_task(backend, user_id, "Fix the fence")
    run_id = await journaled_run(backend, user_id)
    token = UNDOABLE_RUN.set(run_id)
    try:  # the tool completes both; then the user reopens one by hand, before the run is taken back
        for description in ("Clean the gutters", "Fix the fence"):
            await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[TaskUpdate(action="complete", description=description)]))
    finally:
        UNDOABLE_RUN.reset(token)
    await edit_task(backend.store, user_id, task_id, {"status": "in_progress"})

    undone = await undo_run_writes(backend.store, user_id, run_id)
    assert (undone.restored, undone.kept) == ([f"tasks/{fence}"], [f"tasks/{task_id}"])
    assert await tasks_of(backend, user_id) == [("Clean the gutters", "in_progress"), ("Fix the fence", "open")]


async def test_a_run_no_longer_running_writes_nothing_and_a_taken_back_run_nothing_more(backend, user_id):
    from memory.writer.run_undo import UNDOABLE_RUN, RunNotRunning, undo_run_writes

    add = ExtractionResult(task_updates=[TaskUpdate(action="add", description="Repaint the garage door")])
    stopping = await journaled_run(backend, user_id)
    await chat_runs.request_stop(backend.pool, (await chat_runs.get_run(backend.pool, stopping)).thread_id)
    taken_back = await journaled_run(backend, user_id)
    await undo_run_writes(backend.store, user_id, taken_back)  # (a late write of its cancelled tool comes after)
    for run_id in (stopping, taken_back):
        token = UNDOABLE_RUN.set(run_id)
        try:
            with pytest.raises(RunNotRunning):
                await apply_extraction(backend.store, user_id, add)
        finally:
            UNDOABLE_RUN.reset(token)
    assert await tasks_of(backend, user_id) == []


# --------------------------------------------------------------------------- the user's lock held by another writer
class LockHolder:
    """Another writer of the user's memory (a forget, a reindex) holding the user's lock: taken from the
    scripted model's thread (``take``), so it is held before the reply's first token, when the test stops it."""

    def __init__(self, backend, user_id: str, *, release_after: float) -> None:
        self.backend, self.user_id, self.release_after = backend, user_id, release_after
        self.loop = asyncio.get_running_loop()
        self.held = threading.Event()
        self.released = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def _hold(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.backend.pool.conninfo, autocommit=True) as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.user_id),))
                self.held.set()
                try:
                    await asyncio.wait_for(self.released.wait(), self.release_after)
                except TimeoutError:
                    pass

    def take(self) -> None:
        """From the model's thread: the lock is held when this returns."""
        self.loop.call_soon_threadsafe(lambda: setattr(self, "task", self.loop.create_task(self._hold())))
        assert self.held.wait(10)

    async def release(self) -> None:
        self.released.set()
        if self.task is not None:
            await self.task


def calling_then_holding(call: dict, holder_of: list) -> callable:
    """``calling(call)``, and once the tool answered, the user's lock is taken by ``holder_of[0]`` before the reply streams."""
    inner = calling(call)

    def responder(kind, messages):
        if kind == "reply" and isinstance(messages[-1], ToolMessage) and holder_of:
            holder_of[0].take()
        return inner(kind, messages)

    return responder


async def row_of(backend, run_id: str) -> dict:
    async with backend.pool.connection() as conn:
        return await (await conn.execute("SELECT status, undo FROM memory_agent_runs WHERE run_id = %s", (run_id,))).fetchone()


@pytest.mark.slow  # the lock is held past the (shortened) step timeout
async def test_a_stop_waits_for_a_busy_user_lock_to_undo_the_approved_write_instead_of_failing(backend, user_id, turns, monkeypatch):
    monkeypatch.setattr(turn_runner, "DB_STEP_SECONDS", 0.5)
    holder_of: list[LockHolder] = []
    graph, thread_id, turn = turns(calling_then_holding(CALLS["add"], holder_of))
    assert (await turn("[task] see to the house"))[1] == "interrupted"
    holder_of.append(LockHolder(backend, user_id, release_after=1.5))  # longer than a bookkeeping step

    runner, status, events = await turn(Command(resume={"approved": True}), on_token=lambda r: r.stop())
    await holder_of[0].release()
    assert status == "stopped" and events[-1][1]["code"] == "stopped"
    assert await tasks_of(backend, user_id) == [] and await pending(graph, thread_id) == 1
    assert (await row_of(backend, runner.run_id))["status"] == "stopped"


async def test_a_stopped_run_that_wrote_nothing_is_taken_back_without_the_users_lock(backend, user_id, turns, monkeypatch):
    monkeypatch.setattr(turn_runner, "DB_STEP_SECONDS", 0.5)
    holder_of: list[LockHolder] = []
    graph, thread_id, turn = turns(calling_then_holding(CALLS["add"], holder_of))
    assert (await turn("[task] see to the house"))[1] == "interrupted"
    holder_of.append(LockHolder(backend, user_id, release_after=5))  # held until the stop has ended (or 5 s)

    try:  # declined: the run writes nothing to memory, so its take-back has nothing to wait for
        runner, status, events = await turn(Command(resume={"approved": False}), on_token=lambda r: r.stop())
    finally:
        await holder_of[0].release()
    assert status == "stopped" and events[-1][1]["code"] == "stopped"
    assert await pending(graph, thread_id) == 1
    assert (await row_of(backend, runner.run_id))["status"] == "stopped"


async def approved_then_stopped_with_an_undo_that_raises(turn, monkeypatch, error: Exception):
    """A task change asked, approved, and stopped mid-reply while the undo of its write raises ``error``."""
    assert (await turn("[task] repaint the garage door"))[1] == "interrupted"

    async def raising(*args):
        raise error

    monkeypatch.setattr(turn_runner, "undo_run_writes", raising)
    runner, status, _ = await turn(Command(resume={"approved": True}), on_token=lambda r: r.stop())
    monkeypatch.undo()
    return runner, status


async def test_an_undo_that_did_not_complete_keeps_the_journal_for_the_worker_that_takes_the_run_back(backend, user_id, turns, monkeypatch):
    graph, thread_id, turn = turns(calling(CALLS["add"]))
    runner, status = await approved_then_stopped_with_an_undo_that_raises(turn, monkeypatch, OSError("server closed the connection unexpectedly"))
    assert status == "failed" and await tasks_of(backend, user_id) == [("Repaint the garage door", "open")]
    row = await row_of(backend, runner.run_id)
    assert row["status"] in chat_runs.ACTIVE and row["undo"]  # not ended: ending it would drop the journal

    async with backend.pool.connection() as conn:  # its heartbeat expires: a live worker takes it back
        await conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s", (runner.run_id,))
    (dead,) = await chat_runs.take_over_stale(backend.pool, "live-worker", thread_id)
    recovering = TurnRunner(graph=graph, pool=backend.pool, run_id=dead.recovery_run_id, spec=TurnSpec.of_abandoned(dead), emit=lambda *_: None)
    assert await recovering.recover(dead) == "stopped"
    assert await tasks_of(backend, user_id) == [] and await pending(graph, thread_id) == 1


async def test_an_undo_that_fails_for_a_reason_other_than_the_database_ends_the_run_and_frees_the_chat(backend, user_id, turns, monkeypatch):
    """Left active, the row was taken back again every ~20 s by a live worker, failing the same way,
    and the chat refused every message meanwhile."""
    graph, thread_id, turn = turns(calling(CALLS["add"]))
    runner, status = await approved_then_stopped_with_an_undo_that_raises(turn, monkeypatch, ValueError("an item the undo cannot read"))
    assert status == "stopped" and (await row_of(backend, runner.run_id))["status"] == "stopped"
    assert await chat_runs.active_run(backend.pool, thread_id) is None  # the chat takes the next message


async def test_a_dead_workers_message_turn_is_kept_with_the_time_the_message_was_sent(backend, user_id, turns):
    """The worker that takes a dead worker's turn back keeps it as a stopped one: its message kept the
    text and id it recorded but no time (the run's row recorded none)."""
    from core.messages import sent_at, stamp_sent_at

    def replying(kind, messages):
        if kind == "reply":
            return "A long answer that the worker never finished writing."
        return empty_extraction() if kind == "extract" else {"title": "Notes"} if kind == "title" else {"summary": ""}

    graph, thread_id, turn = turns(replying)
    said = datetime(2026, 3, 1, 9, 30, tzinfo=timezone.utc)
    message = stamp_sent_at(HumanMessage("Tell me about the garden", id=str(uuid.uuid4())), said)
    runner, _, _ = await turn({"messages": [message]}, on_token=lambda r: r.abort())
    assert runner.aborted
    async with backend.pool.connection() as conn:
        await conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s", (runner.run_id,))
    (dead,) = await chat_runs.take_over_stale(backend.pool, "live-worker", thread_id)
    recovering = TurnRunner(graph=graph, pool=backend.pool, run_id=dead.recovery_run_id, spec=TurnSpec.of_abandoned(dead), emit=lambda *_: None)
    assert await recovering.recover(dead) == "stopped"
    kept = (await graph.aget_state({"configurable": {"thread_id": thread_id}})).values["messages"]
    assert kept[0].id == message.id and sent_at(kept[0]) == said
