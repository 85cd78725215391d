"""What a message's turn costs in reads of the thread (issue 29: a POST of a message read the
thread's state four times). The entry point reads it once, holding the run slot, and hands that
read to the runner; the runner learns how each phase ended from the graph's stream."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from app.runs.active_runs import ActiveRuns
from app.runs.turn_runner import TurnSpec
from graph.assembly import compile_graph
from llm.chat_model import register_model, unregister_model
from storage.fenced_saver import FencedPostgresSaver
from tests.support.scripted_model import ScriptedChatModel, empty_extraction, plain_answers

pytestmark = pytest.mark.slow

responder = plain_answers(extract=lambda _: empty_extraction(), title="Hops", summary="A test chat.", reply=lambda _: "Noted, thanks.")


@pytest.fixture
def scripted(monkeypatch):
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=responder))
    monkeypatch.setenv("MEMORY_AGENT_MODEL", name)  # the runner's Context takes its model from here
    yield name
    unregister_model(name)


@pytest.fixture
async def runs(backend):
    return ActiveRuns(compile_graph(FencedPostgresSaver(backend.pool), backend.store), backend.pool)


def count_state_reads(graph, monkeypatch) -> list[str]:
    reads: list[str] = []
    real = graph.aget_state

    async def counted(config, *args, **kwargs):
        reads.append(config["configurable"]["thread_id"])
        return await real(config, *args, **kwargs)

    monkeypatch.setattr(graph, "aget_state", counted)
    return reads


async def post_message(runs: ActiveRuns, thread_id: str, user_id: str, text: str) -> list[tuple[str, dict]]:
    """What POST /chats/{id}/messages does: claim the slot, read the head once (its 409 check), launch."""
    run_id = await runs.claim_run_slot(thread_id, user_id, "message")
    head = await runs.graph.aget_state({"configurable": {"thread_id": thread_id}})
    assert not head.interrupts
    spec = TurnSpec(thread_id, user_id, "assistant", "message", {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, user_text=text, head=head)
    handle = runs.launch(run_id, spec)
    events = await handle.collect()
    await handle.task
    return events


async def test_a_message_turn_reads_the_thread_once_and_reports_what_the_checkpoint_holds(runs, backend, user_id, scripted, monkeypatch):
    thread_id = str(uuid.uuid4())
    await post_message(runs, thread_id, user_id, "My name is Ada and I live in Turin.")  # a chat with history
    reads = count_state_reads(runs.graph, monkeypatch)

    events = await post_message(runs, thread_id, user_id, "I also keep bees on the roof.")

    assert events[-1][0] == "done", events
    assert reads == [thread_id], f"the turn read the thread's state {len(reads)} times; the entry point's one read is enough"
    done = events[-1][1]
    monkeypatch.undo()
    saved = (await runs.graph.aget_state({"configurable": {"thread_id": thread_id}})).values
    reply = next(m for m in reversed(saved["messages"]) if isinstance(m, AIMessage))
    question = next(m for m in reversed(saved["messages"]) if isinstance(m, HumanMessage))
    # What the stream told the runner is what was saved.
    assert (done["reply"], done["message_id"], done["user_message_id"]) == (reply.text, reply.id, question.id)
    assert done["memory_written"] == (saved.get("memory_written") or {})
    assert done["usage"] == (saved.get("turn_usage") or {})


async def test_a_runner_without_the_entry_points_read_reads_the_head_itself(runs, backend, user_id, scripted, monkeypatch):
    """The CLI and a dead worker's recovery hand over no head: the runner reads it, once."""
    thread_id = str(uuid.uuid4())
    reads = count_state_reads(runs.graph, monkeypatch)
    run_id = await runs.claim_run_slot(thread_id, user_id, "message")
    spec = TurnSpec(thread_id, user_id, "assistant", "message", {"messages": [HumanMessage("hello", id=str(uuid.uuid4()))]}, user_text="hello")
    handle = runs.launch(run_id, spec)
    events = await handle.collect()
    await handle.task
    assert events[-1][0] == "done" and events[-1][1]["reply"] == "Noted, thanks.", events
    assert reads == [thread_id]
