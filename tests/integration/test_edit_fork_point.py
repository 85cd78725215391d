"""Editing a message or regenerating a reply forks the chat from the checkpoint before the message
(app.http.routes_chats.checkpoint_before). It bisects the branch from the head: listing the
thread's history read and decoded every checkpoint of every branch, ~13 s of a worker's CPU to
regenerate the last reply of a 1,000-message chat (real Postgres)."""

from __future__ import annotations

import math
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from app.http.errors import ApiError
from app.http.routes_chats import NEAR_HEAD, checkpoint_before
from core.state import LAST_NODE
from graph.assembly import compile_graph

TURNS = 60


async def grown_chat(graph) -> tuple[str, list[HumanMessage]]:
    """A chat grown turn by turn (a checkpoint for each message), as a long chat's history is."""
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    asked = []
    for t in range(TURNS):
        asked.append(HumanMessage(f"Day {t}: I watered the basil", id=str(uuid.uuid4())))
        await graph.aupdate_state(config, {"messages": [asked[-1]]}, as_node=LAST_NODE)
        await graph.aupdate_state(config, {"messages": [AIMessage(f"Noted for day {t}", id=str(uuid.uuid4()))]}, as_node=LAST_NODE)
    return thread, asked


@pytest.mark.slow  # 120 checkpoints written
async def test_the_fork_point_is_found_by_reading_the_branch_back_to_the_message_not_the_whole_history(backend, monkeypatch):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread, asked = await grown_chat(graph)
    read: list[str] = []
    saver = backend.checkpointer
    get_tuple, list_all = type(saver).aget_tuple, type(saver).alist

    async def counting_get(self, config):
        read.append("get")
        return await get_tuple(self, config)

    async def counting_list(self, config, **kwargs):
        async for item in list_all(self, config, **kwargs):
            read.append("list")
            yield item

    monkeypatch.setattr(type(saver), "aget_tuple", counting_get)
    monkeypatch.setattr(type(saver), "alist", counting_list)

    bound = 3 + NEAR_HEAD + math.ceil(math.log2(2 * TURNS))  # the head, those near it, a bisection, the fork point and its parent
    fork = await checkpoint_before(graph, thread, asked[-1].id)  # regenerate the last reply
    assert "list" not in read and len(read) <= bound, f"{len(read)} checkpoints read for the last message of {2 * TURNS}"
    before = (await graph.aget_state(fork)).values["messages"]
    assert [m.text for m in before[-2:]] == [f"Day {TURNS - 2}: I watered the basil", f"Noted for day {TURNS - 2}"]

    read.clear()
    fork = await checkpoint_before(graph, thread, asked[TURNS - 10].id)  # edit a message ten turns back
    assert "list" not in read and len(read) <= bound
    before = (await graph.aget_state(fork)).values["messages"]
    assert len(before) == 2 * (TURNS - 10) and before[-1].text == f"Noted for day {TURNS - 11}"


async def test_a_message_whose_earlier_checkpoints_are_gone_is_refused_clearly(backend):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    first = HumanMessage("I live in Rome", id=str(uuid.uuid4()))
    await graph.aupdate_state(config, {"messages": [first, AIMessage("Noted.", id=str(uuid.uuid4()))]}, as_node=LAST_NODE)
    await graph.aupdate_state(config, {"messages": [HumanMessage("My dog is Rex", id=str(uuid.uuid4()))]}, as_node=LAST_NODE)
    await backend.checkpointer.aprune([thread], strategy="keep_latest")  # as a forget prunes a chat's history

    with pytest.raises(ApiError) as err:
        await checkpoint_before(graph, thread, first.id)
    assert err.value.status == 409 and err.value.code == "history_unavailable"
    assert err.value.message.endswith("no point to edit it from.")
