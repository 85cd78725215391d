"""Task tools ask first: the run pauses on interrupt(), and only an approval writes, exactly once."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from graph.assembly import compile_graph
from core.context import Context
from core.dates import dated_task, resolve_date
from llm.chat_model import register_model, unregister_model
from memory.writer.extraction import apply_extraction
from core.schemas import ExtractionResult, TaskUpdate
from memory.user_memory import stored_tasks
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.openai_stub_server import StubRequest, openai_stub, openai_stub_server, structured_answer, tool_call  # noqa: F401
from tests.support.scripted_model import ScriptedChatModel, empty_extraction


def calling(*calls: dict, extraction: dict | None = None):
    """Reply with the given tool calls first, then answer with the tool results; extraction as given."""

    def responder(kind, messages):
        if kind == "reply":
            if isinstance(messages[-1], ToolMessage):
                results = [m.content for m in messages if isinstance(m, ToolMessage)]
                return "Okay. " + " | ".join(results)
            return AIMessage("", tool_calls=[{**c, "id": c.get("id") or f"call_{uuid.uuid4().hex[:6]}"} for c in calls])
        if kind == "extract":
            return extraction or empty_extraction()
        return {"title": "Tasks"} if kind == "title" else {"summary": ""}

    return responder


@pytest.fixture
def run(backend, user_id):
    """Register a scripted model, return a helper that runs one input (text or Command) with ainvoke."""
    names: list[str] = []
    graph = compile_graph(backend.checkpointer, backend.store)

    def use(responder):
        name = f"scripted-{uuid.uuid4().hex[:6]}"
        register_model(name, ScriptedChatModel(responder=responder))
        names.append(name)
        ctx = Context(user_id=user_id, model=name)

        async def send(payload, config):
            if isinstance(payload, str):
                payload = {"messages": [HumanMessage(payload)]}
            return await graph.ainvoke(payload, config, context=ctx)

        return graph, send

    yield use
    for name in names:
        unregister_model(name)


async def task_descriptions(backend, user_id) -> list[str]:
    return sorted(t.description for t in await stored_tasks(backend.store, user_id))


async def test_add_task_pauses_with_a_task_change_interrupt_and_approval_writes_it_once(backend, user_id, run):
    # The extractor also sees "buy milk" in the exchange: the tool and the extractor must not both add it.
    extraction = {**empty_extraction(), "task_updates": [{"action": "add", "description": "Buy milk", "due": "tomorrow"}]}
    graph, send = run(calling({"name": "add_task", "args": {"description": "Buy milk", "due": "tomorrow"}}, extraction=extraction))
    config = new_thread()

    out = await send("Remind me to buy milk tomorrow.", config)
    (pending,) = out["__interrupt__"]
    # The message carries no time of its own here, so "tomorrow" is the day after the turn.
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).date().isoformat()
    milk = dated_task("Buy milk", "tomorrow", tomorrow)  # the task's text carries the date it took
    assert milk.startswith("Buy milk on ")
    assert pending.value == {
        "type": "task_change",
        "action": "add",
        "description": milk,
        "task_id": None,
        "status": None,
        "due": "tomorrow",
        "due_date": tomorrow,
    }
    state = await graph.aget_state(config)
    assert state.next == ("tools",) and [i.id for i in state.interrupts] == [pending.id]
    assert await task_descriptions(backend, user_id) == []  # nothing before the answer

    out = await send(Command(resume={"approved": True}), config)
    assert "__interrupt__" not in out
    (task,) = await stored_tasks(backend.store, user_id)
    assert (task.description, task.due, task.status) == (milk, "tomorrow", "open")
    assert task.source_thread == config["configurable"]["thread_id"]
    tool_message = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert tool_message.content == f"Done: task + {milk}"
    assert out["messages"][-1].content == f"Okay. Done: task + {milk}"


@pytest.mark.parametrize("answer", [{"approved": False}, {"approved": None}, {"approved": "yes"}, False])
async def test_anything_but_an_explicit_approval_writes_nothing(backend, user_id, run, answer):
    graph, send = run(calling({"name": "add_task", "args": {"description": "Call the dentist"}}))
    config = new_thread()
    await send("I should call the dentist.", config)
    out = await send(Command(resume=answer), config)
    assert await task_descriptions(backend, user_id) == []
    assert out["messages"][-1].content == "Okay. The user declined: add task 'Call the dentist'. Nothing changed."
    assert not (await graph.aget_state(config)).next


async def test_resuming_twice_does_not_duplicate(backend, user_id, run):
    graph, send = run(calling({"name": "add_task", "args": {"description": "Renew passport"}}))
    config = new_thread()
    await send("Add renewing my passport to my list.", config)
    first = await send(Command(resume={"approved": True}), config)
    second = await send(Command(resume={"approved": True}), config)  # a double click / retried request
    assert await task_descriptions(backend, user_id) == ["Renew passport"]
    assert len(second["messages"]) == len(first["messages"])


async def test_two_task_calls_in_one_reply_are_confirmed_one_by_one_and_written_once_each(backend, user_id, run):
    graph, send = run(
        calling({"name": "add_task", "args": {"description": "Buy milk"}}, {"name": "add_task", "args": {"description": "Call mom"}})
    )
    config = new_thread()
    out = await send("Remind me to buy milk and to call mom.", config)
    asked = [out["__interrupt__"][0].value["description"]]
    out = await send(Command(resume={"approved": True}), config)
    asked.append(out["__interrupt__"][0].value["description"])
    out = await send(Command(resume={"approved": True}), config)

    assert sorted(asked) == ["Buy milk", "Call mom"]
    assert await task_descriptions(backend, user_id) == ["Buy milk", "Call mom"]
    # Approving the second re-runs the first call: its result must still say it is done, not "no change".
    results = sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage))
    assert all(r.startswith("Done: ") for r in results), results
    assert any("Buy milk" in r for r in results) and any("Call mom" in r for r in results)


async def test_complete_task_asks_then_marks_the_stored_task_done(backend, user_id, run):
    await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Submit the tax return")]))
    (task,) = await stored_tasks(backend.store, user_id)
    graph, send = run(calling({"name": "complete_task", "args": {"description": "Submit the tax return", "task_id": task.id}}))
    config = new_thread()

    out = await send("I submitted my tax return!", config)
    assert out["__interrupt__"][0].value["action"] == "complete"
    assert (await stored_tasks(backend.store, user_id))[0].status == "open"
    await send(Command(resume={"approved": True}), config)
    (done,) = await stored_tasks(backend.store, user_id)
    assert done.id == task.id and done.status == "done" and done.completed_at is not None


async def test_update_task_shows_the_new_status_in_the_confirmation(backend, user_id, run):
    await apply_extraction(backend.store, user_id, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Write the report")]))
    graph, send = run(calling({"name": "update_task", "args": {"description": "Write the report", "status": "in_progress"}}))
    config = new_thread()
    out = await send("I started the report.", config)
    assert out["__interrupt__"][0].value["status"] == "in_progress"  # the user sees what they approve
    await send(Command(resume={"approved": True}), config)
    assert [t.status for t in await stored_tasks(backend.store, user_id)] == ["in_progress"]


@pytest.mark.slow
async def test_interrupt_and_resume_over_the_streaming_openai_client(backend, user_id, openai_stub):
    """The CLI/HTTP path: streamed tool-call deltas, the interrupt in the update stream, a streamed resume."""

    def answer(request: StubRequest):
        if request.kind == "extract":
            return structured_answer(request, empty_extraction())
        if request.kind != "reply":
            return structured_answer(request, {"title": "Tasks"})
        tool_results = [m for m in request.messages if m["role"] == "tool"]
        if tool_results:
            return f"Added. ({tool_results[-1]['content']})"
        return tool_call("add_task", {"description": "Water the plants", "due": "Friday"}, id="call_water")

    openai_stub.reset(answer)
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=f"openai:stub-{uuid.uuid4().hex[:8]}")
    config = new_thread()

    paused = await stream_turn(graph, "Remind me to water the plants on Friday.", config, ctx)
    (pending,) = paused.interrupts
    plants = dated_task("Water the plants", "Friday", resolve_date("Friday", datetime.now(timezone.utc)))
    assert pending.value["description"] == plants and pending.value["due"] == "Friday"
    assert paused.tokens == []  # nothing answered yet
    assert await task_descriptions(backend, user_id) == []

    resumed = await stream_turn(graph, Command(resume={"approved": True}), config, ctx)
    # The model is told the date the task took ("Water the plants on Fri 27 Nov 2026"), so it can say it.
    assert resumed.streamed_reply == f"Added. (Done: task + {plants})"
    assert await task_descriptions(backend, user_id) == [plants]
    second_reply = openai_stub.requests_of("reply")[-1]
    assert second_reply.messages[-1] == {"role": "tool", "content": f"Done: task + {plants}", "tool_call_id": "call_water"}


@pytest.mark.slow
async def test_a_new_message_instead_of_an_answer_drops_the_change_and_the_chat_goes_on(backend, user_id, openai_stub):
    """The user ignores the confirmation and types on: nothing is written, and the model is never sent a call
    without its result (the real API refuses that with HTTP 400, which would break the chat for good)."""

    def answer(request: StubRequest):
        if request.kind == "extract":
            return structured_answer(request, empty_extraction())
        if request.kind != "reply":
            return structured_answer(request, {"title": "Plants"})
        if request.last_user_text == "Remind me to water the plants.":
            return tool_call("add_task", {"description": "Water the plants"}, id="call_plants")
        return "It will be sunny."

    openai_stub.reset(answer)
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=f"openai:stub-{uuid.uuid4().hex[:8]}")
    config = new_thread()
    paused = await stream_turn(graph, "Remind me to water the plants.", config, ctx)
    assert paused.interrupts

    moved_on = await stream_turn(graph, "Actually, what's the weather tomorrow?", config, ctx)
    assert moved_on.streamed_reply == "It will be sunny."
    assert await task_descriptions(backend, user_id) == []
    assert not (await graph.aget_state(config)).next  # no confirmation is pending any more
    sent = openai_stub.requests_of("reply")[-1].messages
    stand_in = next(m for m in sent if m["role"] == "tool")
    assert stand_in["tool_call_id"] == "call_plants" and stand_in["content"].startswith("Not run:")
    # A later turn still works (the stand-in is rebuilt each time; the stored history is unchanged).
    again = await stream_turn(graph, "Thanks!", config, ctx)
    assert again.streamed_reply == "It will be sunny."
