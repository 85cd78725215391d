"""A message deleted outright after the running summary folded it in leaves the summary board too (real Postgres)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage

from core.context import Context
from core.schemas import SummaryBoard
from graph.assembly import compile_graph
from memory.chat_admin import delete_message_everywhere
from memory.user_memory import get_chat


@pytest.mark.slow
async def test_a_deleted_message_the_summary_had_folded_in_leaves_the_board_the_model_sees(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    ctx = Context(user_id=user_id, model="offline", summary_window=2, tail_size=1)  # fold early
    for text in ("My passport number is K4477123 and it expires soon", "We leave for Haifa in May", "The van is booked"):
        await graph.ainvoke({"messages": [HumanMessage(text)]}, config, context=ctx)
    state = await graph.aget_state(config)
    assert "K4477123" in SummaryBoard.model_validate(state.values["summary"]).render()  # folded in
    secret = next(m for m in state.values["messages"] if "K4477123" in m.text)

    await delete_message_everywhere(backend, graph, user_id, thread, secret)

    state = await graph.aget_state(config)
    board = SummaryBoard.model_validate(state.values["summary"])
    assert "K4477123" not in board.model_dump_json() and "passport" not in board.model_dump_json().lower()
    assert "K4477123" not in (await get_chat(backend.store, user_id, thread)).summary_text
    history = [s async for s in graph.aget_state_history(config)]
    assert len(history) == 1  # the earlier checkpoints, which held the board as it was, are pruned
    # A message the board never folded leaves it as it was.
    await graph.ainvoke({"messages": [HumanMessage("Remind me to call Dana")]}, config, context=ctx)
    state = await graph.aget_state(config)
    newest = [m for m in state.values["messages"] if isinstance(m, HumanMessage)][-1]
    folded_before = SummaryBoard.model_validate(state.values["summary"]).model_dump()
    title_before = (await get_chat(backend.store, user_id, thread)).title
    await delete_message_everywhere(backend, graph, user_id, thread, newest)
    assert SummaryBoard.model_validate((await graph.aget_state(config)).values["summary"]).model_dump() == folded_before
    assert (await get_chat(backend.store, user_id, thread)).title == title_before  # nor the title, which it cannot have made


@pytest.mark.slow
async def test_deleting_a_message_again_reports_nothing_and_finishes_a_deletion_that_failed_part_way(backend, user_id, monkeypatch):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    ctx = Context(user_id=user_id, model="offline")
    for text in ("My passport number is K4477123", "I like tea"):
        await graph.ainvoke({"messages": [HumanMessage(text)]}, config, context=ctx)
    secret = next(m for m in (await graph.aget_state(config)).values["messages"] if "K4477123" in m.text)

    prune = backend.checkpointer.aprune

    async def lost(*args, **kwargs):  # the database went away after the text was replaced
        raise OSError("server closed the connection unexpectedly")

    monkeypatch.setattr(backend.checkpointer, "aprune", lost)
    with pytest.raises(OSError):
        await delete_message_everywhere(backend, graph, user_id, thread, secret)
    assert len([s async for s in graph.aget_state_history(config)]) > 1  # the earlier checkpoints still hold it
    monkeypatch.setattr(backend.checkpointer, "aprune", prune)

    shown = next(m for m in (await graph.aget_state(config)).values["messages"] if m.id == secret.id)
    assert shown.text == "[deleted]"
    assert await delete_message_everywhere(backend, graph, user_id, thread, shown) is False  # no deletion to report
    assert len([s async for s in graph.aget_state_history(config)]) == 1  # but the retry pruned them
    assert "tea" in (await get_chat(backend.store, user_id, thread)).summary_text.lower()  # the chat's text is not emptied of the rest


@pytest.mark.slow
async def test_deleting_a_message_keeps_the_fact_and_task_another_chat_also_said(backend, user_id):
    """Said in two chats, a fact and a task named only the first as their source: deleting its
    message deleted them, though the other chat still said them."""
    from memory.user_memory import list_facts, stored_tasks

    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    threads = [str(uuid.uuid4()), str(uuid.uuid4())]
    for thread in threads:
        await graph.ainvoke({"messages": [HumanMessage("I work as a teacher. Remind me to call the bank tomorrow.")]},
                            {"configurable": {"thread_id": thread}}, context=ctx)
    facts = [f for f in await list_facts(backend.store, user_id) if f.text == "Works as a teacher"]
    assert len(facts) == 1 and {s.thread_id for s in facts[0].sources} == set(threads)
    first = next(m for m in (await graph.aget_state({"configurable": {"thread_id": threads[0]}})).values["messages"] if isinstance(m, HumanMessage))
    await delete_message_everywhere(backend, graph, user_id, threads[0], first)
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Works as a teacher"]
    assert [t.description.split(" on ")[0] for t in await stored_tasks(backend.store, user_id)] == ["Call the bank"]
