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
- A worker that died leaves a row whose heartbeat stops; after ``STALE_AFTER_SECONDS``
  the next claim on the thread marks it ``abandoned``. Each run records the thread's
  head when it starts (``head_checkpoint``), so what a reply died in the middle of can
  be taken back like a stopped one (see app.active_runs).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg_pool import AsyncConnectionPool


ACTIVE = ("running", "stopping", "committing")
FINAL = ("finished", "stopped", "interrupted", "failed", "abandoned", "released")
STALE_AFTER_SECONDS = 20
KEEP_FINISHED_DAYS = 7

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
    head_writes text[] NOT NULL DEFAULT '{}'
)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS memory_agent_runs_one_active "
    "ON memory_agent_runs (thread_id) WHERE status IN ('running', 'stopping', 'committing')",
    "CREATE INDEX IF NOT EXISTS memory_agent_runs_user ON memory_agent_runs (user_id)",
)


@dataclass(frozen=True)
class Abandoned:
    """A run whose worker stopped answering, as it was when the next claim found it."""

    run_id: str
    thread_id: str
    was: str  # its status then: running / stopping (reply unfinished) or committing (reply complete)
    head_recorded: bool
    head_checkpoint: str | None
    head_writes: list[str]

    @property
    def reply_unfinished(self) -> bool:
        return self.was in ("running", "stopping")


@dataclass(frozen=True)
class Claim:
    run_id: str
    abandoned: list[Abandoned]


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


async def start_run(pool: AsyncConnectionPool, thread_id: str, user_id: str, kind: str, worker: str) -> Claim:
    """Claim the thread for a new run; RunInProgress when one is active.

    Runs of dead workers found on the way are marked abandoned and returned, so the
    caller can take back what they left half done.
    """
    run_id = str(uuid.uuid4())
    abandoned: list[Abandoned] = []
    for attempt in (1, 2, 3):
        try:
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker) "
                    "VALUES (%s, %s, %s, %s, 'running', %s)",
                    (run_id, thread_id, user_id, kind, worker),
                )
            return Claim(run_id, abandoned)
        except psycopg.errors.UniqueViolation:
            stale = await _abandon_stale(pool, thread_id)
            abandoned.extend(stale)
            if stale:
                continue
            active = await active_run(pool, thread_id)
            if active is None and attempt < 3:  # it finished meanwhile
                continue
            if active is None:
                raise
            raise RunInProgress(active)
    raise RuntimeError("unreachable")


async def _abandon_stale(pool: AsyncConnectionPool, thread_id: str) -> list[Abandoned]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                """
                WITH stale AS (
                    SELECT run_id, status FROM memory_agent_runs
                    WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing')
                      AND heartbeat_at < now() - make_interval(secs => %s)
                    FOR UPDATE
                )
                UPDATE memory_agent_runs r
                SET status = 'abandoned', finished_at = now(), detail = 'its worker stopped answering while ' || stale.status
                FROM stale WHERE r.run_id = stale.run_id
                RETURNING r.run_id, r.thread_id, stale.status AS was, r.head_recorded, r.head_checkpoint, r.head_writes
                """,
                (thread_id, STALE_AFTER_SECONDS),
            )
        ).fetchall()
    return [Abandoned(**{**r, "run_id": str(r["run_id"])}) for r in rows]


async def record_head(pool: AsyncConnectionPool, run_id: str, checkpoint_id: str | None, writes: list[str]) -> None:
    """Where the thread stood when the run began (what taking the run back returns to)."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE memory_agent_runs SET head_recorded = true, head_checkpoint = %s, head_writes = %s WHERE run_id = %s",
            (checkpoint_id, writes, run_id),
        )


async def active_run(pool: AsyncConnectionPool, thread_id: str) -> RunRow | None:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT * FROM memory_agent_runs WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing')",
                (thread_id,),
            )
        ).fetchone()
    return _row(row) if row else None


async def live_run(pool: AsyncConnectionPool, thread_id: str) -> RunRow | None:
    """The active run whose worker still answers: exactly when a new claim would be refused.
    (A dead worker's row stays active until the next claim marks it abandoned.)"""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT * FROM memory_agent_runs WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing') "
                "AND heartbeat_at >= now() - make_interval(secs => %s)",
                (thread_id, STALE_AFTER_SECONDS),
            )
        ).fetchone()
    return _row(row) if row else None


async def get_run(pool: AsyncConnectionPool, run_id: str) -> RunRow | None:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT * FROM memory_agent_runs WHERE run_id = %s", (run_id,))).fetchone()
    return _row(row) if row else None


async def transition(pool: AsyncConnectionPool, run_id: str, to: str, *, when: tuple[str, ...], detail: str | None = None) -> bool:
    """Set the status to ``to`` if it currently is one of ``when``; True when it changed."""
    final = to in FINAL
    async with pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE memory_agent_runs SET status = %s, detail = COALESCE(%s, detail), heartbeat_at = now(), "
            "finished_at = CASE WHEN %s THEN now() ELSE finished_at END "
            "WHERE run_id = %s AND status = ANY(%s)",
            (to, detail, final, run_id, list(when)),
        )
        return cur.rowcount == 1


async def finish(pool: AsyncConnectionPool, run_id: str, status: str, detail: str | None = None) -> None:
    """Mark a run final, whatever active status it had."""
    await transition(pool, run_id, status, when=ACTIVE, detail=detail)


async def request_stop(pool: AsyncConnectionPool, thread_id: str) -> RunRow | None:
    """Ask the running reply on ``thread_id`` to stop; the run's row, or None when none was running."""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "UPDATE memory_agent_runs SET status = 'stopping' WHERE thread_id = %s AND status = 'running' RETURNING *",
                (thread_id,),
            )
        ).fetchone()
    return _row(row) if row else None


async def request_stop_for_user(pool: AsyncConnectionPool, user_id: str) -> list[RunRow]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "UPDATE memory_agent_runs SET status = 'stopping' WHERE user_id = %s AND status = 'running' RETURNING *",
                (user_id,),
            )
        ).fetchall()
    return [_row(r) for r in rows]


async def heartbeat(pool: AsyncConnectionPool, run_ids: list[str]) -> dict[str, str]:
    """Refresh the heartbeat of this worker's runs; returns their statuses (to spot stop requests)."""
    if not run_ids:
        return {}
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "UPDATE memory_agent_runs SET heartbeat_at = now() WHERE run_id = ANY(%s::uuid[]) RETURNING run_id, status",
                (run_ids,),
            )
        ).fetchall()
    return {str(r["run_id"]): r["status"] for r in rows}


async def wait_until_final(pool: AsyncConnectionPool, run_id: str, timeout: float = 15.0) -> RunRow | None:
    """Poll until the run has a final status (or the timeout passes); the last row seen."""
    deadline = time.monotonic() + timeout
    while True:
        run = await get_run(pool, run_id)
        if run is None or run.status in FINAL or time.monotonic() >= deadline:
            return run
        await asyncio.sleep(0.05)


async def delete_thread_runs(pool: AsyncConnectionPool, thread_id: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("DELETE FROM memory_agent_runs WHERE thread_id = %s", (thread_id,))
        return cur.rowcount


async def delete_user_runs(pool: AsyncConnectionPool, user_id: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("DELETE FROM memory_agent_runs WHERE user_id = %s", (user_id,))
        return cur.rowcount
