"""A run's row holds what the user said (its turn's text) and the reply as far as it streamed only
while the run may still be taken back; message deletion and forgets reach rows older than that (real Postgres)."""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import dict_row

from memory.forgetting import forget, forget_message
from storage import chat_runs
from storage.chat_runs import RecordedTurn

SECRET = "My passport number is K4477123"


async def text_of(pool, run_id: str) -> tuple[str | None, str | None]:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT turn->>'text' AS text, partial_reply FROM memory_agent_runs WHERE run_id = %s", (run_id,))).fetchone()
    return row["text"], row["partial_reply"]


async def started(pool, thread_id: str, user_id: str) -> str:
    """A run that recorded its turn and streamed part of its reply (the heartbeat saved it)."""
    run_id = await chat_runs.start_run(pool, thread_id, user_id, "message", "test")
    await chat_runs.record_head(pool, run_id, None, [], RecordedTurn(message_id="m1", text=SECRET))
    async with await psycopg.AsyncConnection.connect(pool.conninfo, autocommit=True, row_factory=dict_row) as conn:
        await chat_runs.heartbeat(conn, {run_id: f"You said: {SECRET}"})
    return run_id


async def test_a_run_keeps_its_turns_text_and_partial_reply_until_it_ends_and_a_late_heartbeat_writes_none_back(backend, user_id):
    run_id = await started(backend.pool, str(uuid.uuid4()), user_id)
    assert await text_of(backend.pool, run_id) == (SECRET, f"You said: {SECRET}")  # what a take-back would need
    await chat_runs.finish(backend.pool, run_id, "stopped")
    assert await text_of(backend.pool, run_id) == (None, None)
    async with await psycopg.AsyncConnection.connect(backend.pool.conninfo, autocommit=True, row_factory=dict_row) as conn:
        await chat_runs.heartbeat(conn, {run_id: f"You said: {SECRET}"})  # a beat that was on its way
    assert await text_of(backend.pool, run_id) == (None, None)


async def test_a_dead_workers_run_hands_its_text_to_the_recover_run_which_holds_it_only_until_it_ends(backend, user_id):
    thread = str(uuid.uuid4())
    run_id = await started(backend.pool, thread, user_id)
    async with backend.pool.connection() as conn:  # its worker died long ago
        await conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s", (run_id,))
    [dead] = await chat_runs.take_over_stale(backend.pool, "live", thread)
    assert dead.turn.text == SECRET and dead.partial_reply == f"You said: {SECRET}"
    assert await text_of(backend.pool, run_id) == (None, None)  # abandoned: final
    assert await text_of(backend.pool, dead.recovery_run_id) == (SECRET, f"You said: {SECRET}")  # if this worker dies too
    await chat_runs.finish(backend.pool, dead.recovery_run_id, "stopped")
    assert await text_of(backend.pool, dead.recovery_run_id) == (None, None)


async def test_deleting_a_message_or_a_forget_clears_the_text_of_ended_runs_kept_from_before_but_not_of_a_running_one(backend, user_id):
    thread, other = str(uuid.uuid4()), str(uuid.uuid4())
    ended = {t: await started(backend.pool, t, user_id) for t in (thread, other)}
    async with backend.pool.connection() as conn:  # ended before runs cleared their text as they ended
        await conn.execute("UPDATE memory_agent_runs SET status = 'finished', finished_at = now() WHERE user_id = %s", (user_id,))
    running = await started(backend.pool, thread, user_id)

    await forget_message(backend.store, user_id, thread, "m1")  # DELETE /chats/{id}/messages/m1
    assert await text_of(backend.pool, ended[thread]) == (None, None)
    assert await text_of(backend.pool, ended[other]) == (SECRET, f"You said: {SECRET}")  # another chat: not this deletion's
    assert await text_of(backend.pool, running) == (SECRET, f"You said: {SECRET}")  # still needed to take it back

    await forget(backend.store, user_id, [], words="passport")  # POST /memory/forget
    assert await text_of(backend.pool, ended[other]) == (None, None)
    assert await text_of(backend.pool, running) == (SECRET, f"You said: {SECRET}")
