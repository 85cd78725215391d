"""The episodic index: every message indexed after the reply with its time, recalled into the
prompt behind a relevance gate, kept in step with edits, deleted with the chat and the user."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from langchain_core.messages import AIMessage, HumanMessage

from core.context import Context
from core.messages import sent_at, stamp_sent_at
from graph.assembly import compile_graph
from memory import episodes
from storage import episodes as episode_table
from tests.support.graph_turns import new_thread, stream_turn


async def rows_of(backend, user: str) -> list[dict]:
    async with backend.pool.connection() as conn:
        return await (
            await conn.execute(
                f"SELECT thread_id, message_id, position, role, sent_at, content FROM {episode_table.TABLE} "
                "WHERE owner = %s ORDER BY thread_id, position",
                (user,),
            )
        ).fetchall()


async def test_every_message_of_a_turn_is_indexed_after_the_reply_with_its_time(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    config = new_thread()
    before = datetime.now(timezone.utc)
    turn = await stream_turn(graph, "I adopted a beagle called Biscuit in March", config, Context(user_id=user_id, model="offline"))
    human, reply = turn.values["messages"][0], turn.values["messages"][-1]
    assert sent_at(human) >= before and sent_at(reply) >= sent_at(human)
    rows = await rows_of(backend, user_id)
    assert [(r["role"], r["message_id"]) for r in rows] == [("user", human.id), ("assistant", reply.id)]
    assert rows[0]["content"] == "I adopted a beagle called Biscuit in March"
    assert rows[0]["sent_at"] == sent_at(human)
