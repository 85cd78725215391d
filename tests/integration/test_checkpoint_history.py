"""A chat keeps the checkpoints of its last turns only (storage.checkpoint_rows.trim_history): every
turn writes the whole message list again, so a history kept forever grows with the square of the
chat's length. The chat itself, and editing within the kept turns, are untouched (real Postgres)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from app.http.errors import ApiError
from app.http.routes_chats import checkpoint_before
from core.context import Context
from core.state import LAST_NODE
from graph.assembly import COMMIT_POINT, compile_graph, reply_phase_durability
from nodes import record_chat
from storage import checkpoint_rows

TURNS = 30


async def counts(pool, thread: str) -> tuple[int, int]:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints, "
                "(SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(t)s AND channel = 'messages') AS message_blobs",
                {"t": thread},
            )
        ).fetchone()
    return row["checkpoints"], row["message_blobs"]


async def test_only_the_last_turns_keep_their_checkpoints_and_the_chat_and_their_edits_are_untouched(backend):
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    asked = []
    for t in range(TURNS):  # one update a turn, counted as load_context counts it
        asked.append(HumanMessage(f"Day {t}: I watered the basil", id=str(uuid.uuid4())))
        turn = {"messages": [asked[-1], AIMessage(f"Noted for day {t}", id=str(uuid.uuid4()))], "user_turns": t + 1}
        await graph.aupdate_state(config, turn, as_node=LAST_NODE)
    assert await counts(backend.pool, thread) == (TURNS, TURNS)

    removed = await checkpoint_rows.trim_history(backend.pool, thread, 10)

    assert removed == TURNS - 11 and await counts(backend.pool, thread) == (11, 11)  # the turn before the kept ones stays: their fork point
    messages = (await graph.aget_state(config)).values["messages"]
    assert len(messages) == 2 * TURNS and messages[0].text == "Day 0: I watered the basil"
    fork = await checkpoint_before(graph, thread, asked[-10].id)  # the oldest kept turn's message can be edited
    assert (await graph.aget_state(fork)).values["messages"][-1].text == f"Noted for day {TURNS - 11}"
    with pytest.raises(ApiError) as err:
        await checkpoint_before(graph, thread, asked[-11].id)
    assert err.value.code == "history_unavailable"
    assert await checkpoint_rows.trim_history(backend.pool, thread, 10) == 0  # nothing more until new turns
    assert await checkpoint_rows.trim_history(backend.pool, thread, 0) == 0  # 0 keeps every checkpoint


async def turns_kept(pool, thread: str) -> list[int]:
    """The turn counter's values among the thread's checkpoints."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT DISTINCT (checkpoint -> 'channel_values' ->> 'user_turns')::int AS turn FROM checkpoints "
                "WHERE thread_id = %s AND checkpoint -> 'channel_values' ? 'user_turns' ORDER BY 1",
                (thread,),
            )
        ).fetchall()
    return [r["turn"] for r in rows]


@pytest.mark.slow  # six turns through the graph
async def test_a_chat_trims_its_history_as_it_goes_along_its_current_branch(backend, user_id, monkeypatch):
    monkeypatch.setenv(checkpoint_rows.HISTORY_ENV, "2")
    monkeypatch.setattr(record_chat, "TRIM_EVERY", 1)
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    ctx = Context(user_id=user_id, model="offline")
    for i in range(1, 6):
        await graph.ainvoke(
            {"messages": [HumanMessage(f"I like rivers, message {i}")]}, config, context=ctx,
            interrupt_before=[COMMIT_POINT], durability=reply_phase_durability(i == 1),
        )
        await graph.ainvoke(None, config, context=ctx)
        assert await turns_kept(backend.pool, thread) == list(range(max(1, i - 2), i + 1))  # the last 2, and the one before
    asked = [m for m in (await graph.aget_state(config)).values["messages"] if isinstance(m, HumanMessage)]
    assert [m.text for m in asked] == [f"I like rivers, message {i}" for i in range(1, 6)]
    with pytest.raises(ApiError):
        await checkpoint_before(graph, thread, asked[2].id)  # turn 3: its fork point, turn 2's end, is gone

    # Edit turn 4's message: a new branch from turn 3's end. Its own trim counts that branch's
    # turns, not the abandoned turns 4 and 5, so the edited message can be regenerated at once.
    fork = await checkpoint_before(graph, thread, asked[3].id)
    edit = {"messages": [HumanMessage("I like lakes, message 4")]}
    await graph.ainvoke(edit, fork, context=ctx, interrupt_before=[COMMIT_POINT], durability=reply_phase_durability(False))
    await graph.ainvoke(None, config, context=ctx)
    edited = (await graph.aget_state(config)).values["messages"]
    assert [m.text for m in edited if isinstance(m, HumanMessage)][-1] == "I like lakes, message 4"
    again = await checkpoint_before(graph, thread, edited[-2].id)
    assert (await graph.aget_state(again)).values["messages"][-1].text == edited[-3].text


def test_the_history_setting_is_read_in_turns_and_a_bad_value_is_refused_clearly(monkeypatch):
    monkeypatch.delenv(checkpoint_rows.HISTORY_ENV, raising=False)
    assert checkpoint_rows.history_turns() == checkpoint_rows.DEFAULT_HISTORY_TURNS
    monkeypatch.setenv(checkpoint_rows.HISTORY_ENV, "0")
    assert checkpoint_rows.history_turns() == 0
    for bad in ("many", "-3", "2.5"):
        monkeypatch.setenv(checkpoint_rows.HISTORY_ENV, bad)
        with pytest.raises(ValueError, match=checkpoint_rows.HISTORY_ENV):
            checkpoint_rows.history_turns()
