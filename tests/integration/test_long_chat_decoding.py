"""A turn on a long chat reads the thread's checkpoint at the start of each phase; decoding its
messages cost ~23 ms at 2,000 messages, twice a turn. What the phase before wrote or read is not
decoded again (storage.checkpoint_serde; real Postgres)."""

from __future__ import annotations

import uuid

import pytest

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from core.context import Context
from core.state import LAST_NODE
from graph.assembly import COMMIT_POINT, compile_graph
from storage import thread_owners
from storage.checkpoint_serde import MIN_CACHED_BYTES

HISTORY = 600


@pytest.mark.slow  # the turn indexes the 600 messages
async def test_a_turn_on_a_long_chat_does_not_decode_the_chats_messages_again(backend, user_id, monkeypatch):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    await thread_owners.claim_ownership(backend.pool, thread, user_id)
    history = [
        HumanMessage(f"Day {i // 2}: I watered the tomatoes and the basil on the balcony", id=str(uuid.uuid4())) if i % 2 == 0
        else AIMessage(f"Noted for day {i // 2}; the basil likes the morning sun", id=str(uuid.uuid4()))
        for i in range(HISTORY)
    ]
    await graph.aupdate_state(config, {"messages": history, "summarized_through": history[-5].id}, as_node=LAST_NODE)

    decoded: list[int] = []
    decode = JsonPlusSerializer.loads_typed

    def counting(self, data):
        value = decode(self, data)
        if isinstance(value, list) and len(value) >= HISTORY and all(isinstance(m, BaseMessage) for m in value):
            decoded.append(len(data[1]))
        return value

    monkeypatch.setattr(JsonPlusSerializer, "loads_typed", counting)
    ctx = Context(user_id=user_id, model="offline")
    # The two phases as a chat runs them (app/runs/turn_runner.py), each starting from the checkpoint.
    await graph.ainvoke({"messages": [HumanMessage("What did I water?")]}, config, context=ctx, interrupt_before=[COMMIT_POINT])
    await graph.ainvoke(None, config, context=ctx)

    state = await graph.aget_state(config)
    assert len(state.values["messages"]) == HISTORY + 2 and state.values["messages"][-1].type == "ai"
    assert decoded == [], f"the chat's messages decoded {len(decoded)} times ({decoded} bytes; cached from {MIN_CACHED_BYTES})"
