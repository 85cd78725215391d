"""Replies in flight, one row per run, shared by every server process through Postgres.

Why a table: any uvicorn worker may receive a chat's next request, so "is a reply
running on this chat?" and "stop it" must be answered by the database, not by one
process' memory.

- One writer per thread: a partial unique index allows at most one *active* run
  (``running``, ``stopping`` or ``committing``) per thread, so a second message on
  the same chat fails atomically (HTTP 409) whichever worker receives it. This keeps
  the checkpoint chain linear: two runs on one thread would both extend the same
  parent checkpoint and one reply would silently vanish from the history.
- Stop: ``/stop`` flips ``running`` to ``stopping``; the worker that runs the reply
  polls its rows (it also refreshes ``heartbeat_at`` there) and cancels the run.
- Commit point: once the reply is complete the worker flips ``running`` to
  ``committing`` before it updates memory. Both flips are conditional UPDATEs, so a
  stop and a commit racing each other have exactly one winner.
- A worker that died leaves a row whose heartbeat stops. After ``STALE_AFTER_SECONDS``
  a live worker takes it over (:func:`take_over_stale`: its periodic reaper, a claim
  on the thread, or a ``/stop``): the dead row becomes ``abandoned`` and a ``recover``
  row of the live worker holds the thread while it takes the half-turn back as a
  stopped one (see app.runs.active_runs). For that each run records the thread's head when
  it starts (``head_checkpoint``), the turn it answers (``turn``: the user's message,
  the fork point of an edit), and its heartbeat saves the reply as far as it streamed
  (``partial_reply``).
- Undo journal (``undo``): each store write a run's tools make (an approved task change) is
  journaled with the value it replaced, in the write's own transaction and only while the run is
  ``running`` (:func:`journal_writes`), so taking the run back, by whichever worker, can undo it
  (memory.writer.run_undo). A recover run carries the dead run's journal.
- What the user said stays only while it may be needed: a run that reaches a final status loses its
  turn's text and its partial reply (the transcript keeps them, and deleting or forgetting them there
  must not leave a copy here); :func:`clear_text` does the same for ended rows on a deletion or a forget.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from core.text_validation import made_storable, made_storable_value
from storage import chat_imports, owner_forgets
from storage.chat_imports import refuse_runs_while_importing

ACTIVE = ("running", "stopping", "committing")
FINAL = ("finished", "stopped", "interrupted", "failed", "abandoned", "released")
# What an ended run no longer needs of what the user said: the take-back reads both only from an active row.
_CLEARED = "turn = turn - 'text', partial_reply = NULL, undo = NULL"
_HAS_TEXT = "(partial_reply IS NOT NULL OR turn ? 'text' OR undo IS NOT NULL)"
# Heartbeats come every 0.2 s (app.runs.active_runs); a worker silent this long is dead. With the
# reaper's period this frees a dead worker's chat within STALE_AFTER + REAP_EVERY (20 s).
STALE_AFTER_SECONDS = 15
RECOVER = "recover"  # the kind of a live worker's run that takes a dead one's turn back
KEEP_FINISHED_DAYS = 7
TAKE_OVER_AT_ONCE = 20  # dead runs one take-over claims (a reaper round that got this many looks again at once)

CREATE = (
    """CREATE TABLE IF NOT EXISTS memory_agent_runs (
    run_id uuid PRIMARY KEY,
    thread_id text NOT NULL,
    user_id text NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    worker text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    detail text,
    head_recorded boolean NOT NULL DEFAULT false,
    head_checkpoint text,
    head_writes text[] NOT NULL DEFAULT '{}',
    turn jsonb,
    partial_reply text,
    undo jsonb
)""",
    # Tables created before dead runs were kept as stopped turns.
    "ALTER TABLE memory_agent_runs ADD COLUMN IF NOT EXISTS turn jsonb",
    "ALTER TABLE memory_agent_runs ADD COLUMN IF NOT EXISTS partial_reply text",
    # Tables created before a taken-back run undid its tools' writes.
    "ALTER TABLE memory_agent_runs ADD COLUMN IF NOT EXISTS undo jsonb",
    "CREATE UNIQUE INDEX IF NOT EXISTS memory_agent_runs_one_active "
    "ON memory_agent_runs (thread_id) WHERE status IN ('running', 'stopping', 'committing')",
    "CREATE INDEX IF NOT EXISTS memory_agent_runs_user ON memory_agent_runs (user_id)",
)


class RecordedTurn(BaseModel):
    """What a run answers, recorded when it starts: enough for another worker to keep the
    turn as a stopped one when this worker dies."""

    persona: str = "assistant"
    message_id: str | None = None  # the user's message (None: a resume, which is taken back whole)
    text: str = ""
    sent_at: datetime | None = None  # when the message was sent (kept when its turn is kept as a stopped one)
    fork_checkpoint: str | None = None  # an edit's or a regeneration's fork point


@dataclass(frozen=True)
class Abandoned:
    """A run whose worker stopped answering, as it was when a live worker took it over."""

    run_id: str
    thread_id: str
    user_id: str
    kind: str
    was: str  # its status then: running / stopping (reply unfinished) or committing (reply complete)
    head_recorded: bool
    head_checkpoint: str | None
    head_writes: list[str]
    turn: RecordedTurn | None
    partial_reply: str
    recovery_run_id: str  # the live worker's run holding the thread while it takes this one back

    @property
    def reply_unfinished(self) -> bool:
        return self.was in ("running", "stopping")


class RunInProgress(Exception):
    """Another run is active on the thread."""

    def __init__(self, run: "RunRow") -> None:
        super().__init__(f"run {run.run_id} ({run.kind}) is {run.status} on thread {run.thread_id}")
        self.run = run


@dataclass(frozen=True)
class RunRow:
    run_id: str
    thread_id: str
    user_id: str
    kind: str
    status: str
    worker: str
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    detail: str | None
    stale: bool = False  # its heartbeat expired: its worker is dead

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


# Every read of a row says whether its worker still answers.
_SELECT = f"SELECT *, heartbeat_at < now() - make_interval(secs => {STALE_AFTER_SECONDS}) AS stale FROM memory_agent_runs"
_RETURNING = f"RETURNING *, heartbeat_at < now() - make_interval(secs => {STALE_AFTER_SECONDS}) AS stale"


def _row(r: dict) -> RunRow:
    return RunRow(**{k: (str(v) if k == "run_id" else v) for k, v in r.items() if k in RunRow.__dataclass_fields__})


async def setup(pool: AsyncConnectionPool) -> None:
    """Idempotent; run by the backend's set-up, under its schema lock (workers start together)."""
    async with pool.connection() as conn:
        for statement in CREATE:
            await conn.execute(statement)
        # Finished rows are only kept a while, for /stop answers and debugging.
        await conn.execute(
            "DELETE FROM memory_agent_runs WHERE finished_at < now() - make_interval(days => %s)", (KEEP_FINISHED_DAYS,)
        )
        # Rows that ended while ending did not yet clear their text (older versions).
        await conn.execute(
            f"UPDATE memory_agent_runs SET {_CLEARED} WHERE status = ANY(%s) AND {_HAS_TEXT}", (list(FINAL),)
        )


async def start_run(
    pool: AsyncConnectionPool, thread_id: str, user_id: str, kind: str, worker: str, *, known_generation: int | None = None
) -> str:
    """Claim the thread for a new run; its id. RunInProgress when one is active (a dead
    worker's too: ``RunInProgress.run.stale`` says so, see :func:`take_over_stale`);
    ImportInProgress while the chat is being imported or its import is incomplete.

    OwnerForgotten when ``user_id`` was forgotten since the caller was authenticated
    (``known_generation``, by default the current request's: :mod:`storage.owner_forgets`), checked
    in the insert's transaction: every turn (HTTP, CLI) starts here, and a run that got its row
    before forget-me's first step committed is one forget-me stops."""
    run_id = str(uuid.uuid4())
    known = owner_forgets.known_generation(user_id, known_generation)
    for attempt in (1, 2, 3):
        try:
            async with pool.connection() as conn, conn.transaction():
                await owner_forgets.check(conn, user_id, known)
                await chat_imports.lock_thread(conn, thread_id)  # an import beginning on the chat meanwhile waits, or is seen
                # Not while the chat has an import (its row exists before anyone can reach its chat):
                # in the insert's own statement, a round trip before every reply; which import, after.
                inserted = await conn.execute(
                    "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker) "
                    f"SELECT %s, %s, %s, %s, 'running', %s WHERE NOT EXISTS (SELECT 1 FROM {chat_imports.TABLE} WHERE thread_id = %s)",
                    (run_id, thread_id, user_id, kind, worker, thread_id),
                )
                if not inserted.rowcount:
                    await refuse_runs_while_importing(conn, thread_id)
                    continue  # (its import ended in between: try again)
            return run_id
        except psycopg.errors.UniqueViolation:
            active = await active_run(pool, thread_id)
            if active is not None:
                raise RunInProgress(active) from None
            if attempt == 3:
                raise
            # it finished meanwhile: try again
    raise RuntimeError(f"could not start a run on chat {thread_id}: it was busy, or being imported, at each of three tries")


async def take_over_stale(
    pool: AsyncConnectionPool, worker: str, thread_id: str | None = None, limit: int = TAKE_OVER_AT_ONCE
) -> list[Abandoned]:
    """Take over the active runs whose heartbeat expired (of one thread, or any): each becomes
    ``abandoned`` and, in the same transaction, a ``recover`` run of ``worker`` holds its thread
    (so no new message lands before the half-turn is taken back). The recover run carries the
    dead one's head, turn and partial reply, so that if ``worker`` dies too the next taker
    repeats the same take-back. Rows another worker is taking over are skipped."""
    async with pool.connection() as conn, conn.transaction():
        dead = await (
            await conn.execute(
                """
                WITH stale AS (
                    SELECT run_id, status, turn, partial_reply, undo FROM memory_agent_runs
                    WHERE status IN ('running', 'stopping', 'committing')
                      AND heartbeat_at < now() - make_interval(secs => %s)
                      AND (%s::text IS NULL OR thread_id = %s)
                    ORDER BY heartbeat_at LIMIT %s
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE memory_agent_runs r
                SET status = 'abandoned', finished_at = now(), detail = 'its worker stopped answering while ' || stale.status,
                    turn = r.turn - 'text', partial_reply = NULL, undo = NULL
                FROM stale WHERE r.run_id = stale.run_id
                RETURNING r.run_id, r.thread_id, r.user_id, r.kind, stale.status AS was, r.head_recorded,
                          r.head_checkpoint, r.head_writes, stale.turn, stale.partial_reply, stale.undo
                """,
                (STALE_AFTER_SECONDS, thread_id, thread_id, limit),
            )
        ).fetchall()
        taken: list[Abandoned] = []
        for r in dead:
            recovery = str(uuid.uuid4())
            await conn.execute(
                "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker, detail, "
                "head_recorded, head_checkpoint, head_writes, turn, partial_reply, undo) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    recovery, r["thread_id"], r["user_id"], RECOVER,
                    "running" if r["was"] in ("running", "stopping") else "committing",  # what a later taker must redo
                    worker, f"taking back run {r['run_id']}", r["head_recorded"], r["head_checkpoint"], r["head_writes"],
                    Jsonb(r["turn"]) if r["turn"] is not None else None, r["partial_reply"],
                    Jsonb(r["undo"]) if r["undo"] is not None else None,
                ),
            )
            turn = RecordedTurn.model_validate(r["turn"]) if r["turn"] is not None else None
            taken.append(
                Abandoned(
                    run_id=str(r["run_id"]), thread_id=r["thread_id"], user_id=r["user_id"], kind=r["kind"], was=r["was"],
                    head_recorded=r["head_recorded"], head_checkpoint=r["head_checkpoint"], head_writes=list(r["head_writes"]),
                    turn=turn, partial_reply=r["partial_reply"] or "", recovery_run_id=recovery,
                )
            )
    return taken


async def record_head(
    pool: AsyncConnectionPool, run_id: str, checkpoint_id: str | None, writes: list[str], turn: RecordedTurn | None = None
) -> None:
    """Where the thread stood when the run began (what taking the run back returns to), and the turn it answers."""
    # Storable whoever wrote the message: a regenerate re-sends a message of the state as it is kept,
    # which an Overwrite of the state (past the reducers of core.state) may have left with a NUL.
    recorded = Jsonb(made_storable_value(turn.model_dump(mode="json"))) if turn is not None else None
    async with pool.connection() as conn:
        # (A run taken over meanwhile has ended: its row gets no text.)
        await conn.execute(
            "UPDATE memory_agent_runs SET head_recorded = true, head_checkpoint = %s, head_writes = %s, "
            "turn = CASE WHEN status = ANY(%s) THEN %s ELSE %s::jsonb - 'text' END WHERE run_id = %s",
            (checkpoint_id, writes, list(ACTIVE), recorded, recorded, run_id),
        )


async def _rows(pool: AsyncConnectionPool, sql: str, params: tuple) -> list[RunRow]:
    async with pool.connection() as conn:
        return [_row(r) for r in await (await conn.execute(sql, params)).fetchall()]


async def active_run(pool: AsyncConnectionPool, thread_id: str) -> RunRow | None:
    found = await _rows(pool, f"{_SELECT} WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing')", (thread_id,))
    return found[0] if found else None


async def active_turn_texts(pool: AsyncConnectionPool, user_id: str) -> list[str]:
    """What the user said in each of their turns being answered now (its words are in no index yet)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT turn ->> 'text' AS text FROM memory_agent_runs WHERE user_id = %s AND status = ANY(%s) AND turn ? 'text'",
            (user_id, list(ACTIVE)),
        )).fetchall()
    return [r["text"] for r in rows if r["text"]]


async def get_run(pool: AsyncConnectionPool, run_id: str) -> RunRow | None:
    found = await _rows(pool, f"{_SELECT} WHERE run_id = %s", (run_id,))
    return found[0] if found else None


async def transition(pool: AsyncConnectionPool, run_id: str, to: str, *, when: tuple[str, ...], detail: str | None = None) -> bool:
    """Set the status to ``to`` if it currently is one of ``when``; True when it changed."""
    final = to in FINAL
    async with pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE memory_agent_runs SET status = %s, detail = COALESCE(%s, detail), heartbeat_at = now(), "
            "finished_at = CASE WHEN %s THEN now() ELSE finished_at END"
            + (f", {_CLEARED}" if final else "")
            + " WHERE run_id = %s AND status = ANY(%s)",
            (to, detail, final, run_id, list(when)),
        )
        return cur.rowcount == 1


async def finish(pool: AsyncConnectionPool, run_id: str, status: str, detail: str | None = None) -> None:
    """Mark a run final, whatever active status it had."""
    await transition(pool, run_id, status, when=ACTIVE, detail=detail)


async def request_stop(pool: AsyncConnectionPool, thread_id: str) -> RunRow | None:
    """Ask the running reply on ``thread_id`` to stop; the run's row, or None when none was running.
    A run another stop is ending already (``stopping``) is returned too: that stop's caller waits for
    it as well, and is told it stopped, not that nothing was running."""
    found = await _rows(
        pool, f"UPDATE memory_agent_runs SET status = 'stopping' WHERE thread_id = %s AND status IN ('running', 'stopping') {_RETURNING}", (thread_id,)
    )
    return found[0] if found else None


async def request_stop_for_user(pool: AsyncConnectionPool, user_id: str) -> list[RunRow]:
    return await _rows(pool, f"UPDATE memory_agent_runs SET status = 'stopping' WHERE user_id = %s AND status = 'running' {_RETURNING}", (user_id,))


async def heartbeat(conn: psycopg.AsyncConnection, beats: dict[str, str | None]) -> dict[str, str]:
    """Refresh the heartbeat of this worker's runs, saving each reply as far as it streamed
    (None: unchanged since the last beat); returns their statuses (to spot stop requests).

    On a connection of its own (app.runs.active_runs): a busy pool must not look like a dead worker."""
    if not beats:
        return {}
    rows = await (
        await conn.execute(
            # A beat sent as its run ended writes no text back into the ended row.
            "UPDATE memory_agent_runs r SET heartbeat_at = now(), "
            "partial_reply = CASE WHEN r.status = ANY(%s) THEN COALESCE(b.text, r.partial_reply) END "
            "FROM unnest(%s::uuid[], %s::text[]) AS b(run_id, text) WHERE r.run_id = b.run_id RETURNING r.run_id, r.status",
            # A model's streamed reply may hold a NUL: one failing beat fails every run of the worker's.
            (list(ACTIVE), list(beats), [made_storable(t) if t is not None else None for t in beats.values()]),
        )
    ).fetchall()
    return {str(r["run_id"]): r["status"] for r in rows}


async def clear_text(pool: AsyncConnectionPool, user_id: str, thread_id: str | None = None) -> int:
    """Clear what the user said from their ended runs (of one thread, or all): rows that ended before
    runs cleared it as they ended. An active run keeps it: taking it back needs it."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"UPDATE memory_agent_runs SET {_CLEARED} WHERE user_id = %s AND (%s::text IS NULL OR thread_id = %s) "
            f"AND status = ANY(%s) AND {_HAS_TEXT}",
            (user_id, thread_id, thread_id, list(FINAL)),
        )
        return cur.rowcount


async def journal_writes(conn: psycopg.AsyncConnection, run_id: str, entries: list[dict]) -> bool:
    """Append ``entries`` (what a tool's store writes replaced) to the run's undo journal, on ``conn``:
    the writes' own transaction. False when the run is no longer ``running`` (stopped, taken over,
    ended) or was taken back already: then the writes must not happen."""
    cur = await conn.execute(
        "UPDATE memory_agent_runs SET undo = COALESCE(undo, '[]'::jsonb) || %s "
        "WHERE run_id = %s AND status = 'running' AND (undo IS NULL OR jsonb_typeof(undo) = 'array')",
        (Jsonb(entries), run_id),
    )
    return cur.rowcount == 1


async def journaled_writes(conn: psycopg.AsyncConnection, run_id: str) -> list[dict]:
    """The run's undo journal, its row locked until the transaction on ``conn`` ends; closed by :func:`close_journal`."""
    row = await (await conn.execute("SELECT undo FROM memory_agent_runs WHERE run_id = %s FOR UPDATE", (run_id,))).fetchone()
    undo = row["undo"] if row is not None else None
    return list(undo) if isinstance(undo, list) else []


async def settle_journal(pool: AsyncConnectionPool, run_id: str) -> bool:
    """Whether the run journaled writes that taking it back must undo (memory.writer.run_undo). A
    journal with none is closed here and now, without the user's lock: a run that wrote nothing is
    taken back without waiting for a forget or a reindex holding it. (A write in flight holds the
    row, and is waited for: then its entries are found.)"""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "UPDATE memory_agent_runs SET undo = CASE WHEN jsonb_typeof(undo) = 'array' AND jsonb_array_length(undo) > 0 "
                "THEN undo ELSE 'false'::jsonb END WHERE run_id = %s RETURNING jsonb_typeof(undo) = 'array' AS pending",
                (run_id,),
            )
        ).fetchone()
    return bool(row is not None and row["pending"])


async def close_journal(conn: psycopg.AsyncConnection, run_id: str) -> None:
    """The run's writes were undone: its journal is emptied and closed (``false``), so a late write of
    the cancelled run finds no journal to join and is refused."""
    await conn.execute("UPDATE memory_agent_runs SET undo = 'false'::jsonb WHERE run_id = %s", (run_id,))


async def _delete(pool: AsyncConnectionPool, column: str, value: str) -> int:
    async with pool.connection() as conn:
        return (await conn.execute(f"DELETE FROM memory_agent_runs WHERE {column} = %s", (value,))).rowcount


async def delete_thread_runs(pool: AsyncConnectionPool, thread_id: str) -> int:
    return await _delete(pool, "thread_id", thread_id)


async def delete_user_runs(pool: AsyncConnectionPool, user_id: str) -> int:
    return await _delete(pool, "user_id", user_id)
