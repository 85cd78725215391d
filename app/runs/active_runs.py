"""The turns running in this process, how a stop request reaches them, and who finishes
the runs of dead workers.

Each run executes in its own asyncio task, independent of the HTTP request that
started it: a client that disconnects does not cancel its reply (the reply is saved
and shows up when the chat is opened again); only ``/stop`` does.

A stop may arrive at any worker. The worker that receives it marks the run's row
``stopping`` (see :mod:`storage.chat_runs`) and, when the run is its own, stops it at
once. Every worker also polls its own runs' rows every ``POLL_SECONDS`` (refreshing
their heartbeat and saving each reply as far as it streamed, in the same UPDATE) and
stops those marked ``stopping``. The heartbeat has a connection of its own: when it
fails for ``DATABASE_LOST_SECONDS`` the database is gone, and every run of this worker
is aborted: its client gets an ``error`` event at once instead of waiting on a pool.

Dead workers: a run whose heartbeat expired is taken over by a live worker, which takes
its half-turn back as a stopped one (:meth:`app.runs.turn_runner.TurnRunner.recover`). The
servers' reaper looks every ``REAP_EVERY_SECONDS``; a claim or a ``/stop`` on the chat
does it at once.

The CLI runs its turns through this class too: one lock per chat, whichever window or
server the message comes from.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator

import psycopg

from app.runs.turn_runner import TurnRunner, TurnSpec
from storage import chat_runs
from storage.postgres import CONNECTION_KWARGS

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
HEARTBEAT_TIMEOUT_SECONDS = 2.0
DATABASE_LOST_SECONDS = 3.0  # no heartbeat got through for this long: the database is gone
REAP_EVERY_SECONDS = 5.0
CLAIM_WAIT_SECONDS = 10.0  # how long a claim waits for another worker's take-back of a dead run
SHUTDOWN_GRACE_SECONDS = 10.0
TERMINAL = ("done", "interrupt", "error")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RunHandle:
    """A run's events, in order; ``None`` marks the end, which follows the run's terminal event
    at once (the run's bookkeeping may go on after it, but the client is not kept waiting).

    ``accepted`` is set once the run has recorded the turn it answers (from then on, if this
    worker dies, a live one keeps the turn), or when the stream ends before that: the HTTP
    API answers only then, so a client that got an answer never loses its message to a
    worker that died before recording it (without an answer the message is still the client's)."""

    run_id: str
    spec: TurnSpec
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None
    runner: TurnRunner | None = None
    ended: bool = False
    accepted: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, name: str, data: dict) -> None:
        if self.ended:
            return  # e.g. a run's own error after abort() already ended the stream
        self.queue.put_nowait((name, data))
        if name in TERMINAL:
            self.end()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.queue.put_nowait(None)
        self.accepted.set()

    async def events(self):
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    async def collect(self) -> list[tuple[str, dict]]:
        return [e async for e in self.events()]


class ActiveRuns:
    def __init__(self, graph, pool) -> None:
        self.graph = graph
        self.pool = pool
        self.worker = worker_id()
        self.runs: dict[str, RunHandle] = {}
        self.recovering: set[str] = set()  # recover runs of this worker (heartbeated like the others)
        self.held: set[str] = set()  # slots held for work done in place, without a run (see hold)
        self._poller: asyncio.Task | None = None
        self._reaper: asyncio.Task | None = None
        self._beat_conn: psycopg.AsyncConnection | None = None
        self._beats_failing_since: float | None = None
        self._sent: dict[str, int] = {}  # how much of each reply the heartbeat has saved

    async def claim_run_slot(self, thread_id: str, user_id: str, kind: str) -> str:
        """Claim the thread for a run (RunInProgress when another is active).

        A run of a dead worker (its heartbeat expired) is taken over first: its half-turn is
        kept as a stopped one, so the thread holds no half-done turn and nothing is lost.
        """
        deadline = time.monotonic() + CLAIM_WAIT_SECONDS
        while True:
            try:
                return await chat_runs.start_run(self.pool, thread_id, user_id, kind, self.worker)
            except chat_runs.RunInProgress as busy:
                if time.monotonic() > deadline:
                    raise
                if busy.run.stale:
                    await self.reap(thread_id)
                elif busy.run.kind == chat_runs.RECOVER:
                    await asyncio.sleep(0.1)  # another worker is taking a dead run back: a moment
                else:
                    raise

    @asynccontextmanager
    async def hold(self, run_id: str) -> AsyncIterator[str]:
        """Hold a claimed slot (:meth:`claim_run_slot`) for work done in place of a run (deleting a
        message, a chat): heartbeated meanwhile, so no worker takes it for a dead one, and released
        when the work ends, however it ends. (A launched run releases its slot itself; nothing
        would release this one, and the chat would refuse every message until it expired.)"""
        self.held.add(run_id)
        self._ensure_poller()
        try:
            yield run_id
        finally:
            self.held.discard(run_id)
            await asyncio.shield(chat_runs.finish(self.pool, run_id, "released"))

    def launch(self, run_id: str, spec: TurnSpec) -> RunHandle:
        handle = RunHandle(run_id, spec)
        handle.runner = TurnRunner(
            graph=self.graph, pool=self.pool, run_id=run_id, spec=spec, emit=handle.put, on_recorded=handle.accepted.set
        )
        self.runs[run_id] = handle
        handle.task = asyncio.create_task(self._execute(handle), name=f"turn-{run_id}")
        self._ensure_poller()
        return handle

    async def _execute(self, handle: RunHandle) -> None:
        try:
            await handle.runner.run()
        finally:
            self.runs.pop(handle.run_id, None)
            self._sent.pop(handle.run_id, None)
            handle.end()

    def stop_local(self, run_id: str) -> bool:
        handle = self.runs.get(run_id)
        if handle is None:
            return False
        handle.runner.stop()
        return True

    # ------------------------------------------------------------------ dead workers
    def start_reaper(self) -> None:
        """Look for dead workers' runs every REAP_EVERY_SECONDS (servers; the CLI reaps only the chat it claims)."""
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap_forever(), name="run-reaper")

    async def _reap_forever(self) -> None:
        while True:
            try:
                taken = await self.reap()
            except Exception as exc:  # the database may be down: try again next round
                log.warning("looking for dead workers' runs failed: %s", exc)
                taken = []
            if len(taken) < chat_runs.TAKE_OVER_AT_ONCE:  # (a full round: more may be waiting, look again now)
                await asyncio.sleep(REAP_EVERY_SECONDS)

    async def reap(self, thread_id: str | None = None) -> list[chat_runs.Abandoned]:
        """Take over the runs with an expired heartbeat (of one thread, or all) and finish them.

        The take-backs run side by side: a worker that died with many runs frees every chat
        in about the time of one take-back, not of all of them in turn. Each is heartbeated
        from the moment it is taken over, so no other worker takes it for a dead one meanwhile;
        and it goes on if the caller (a request) is cancelled."""
        taken = await asyncio.wait_for(chat_runs.take_over_stale(self.pool, self.worker, thread_id), HEARTBEAT_TIMEOUT_SECONDS * 3)
        if taken:
            self.recovering.update(dead.recovery_run_id for dead in taken)
            self._ensure_poller()
            await asyncio.shield(asyncio.gather(*(self._recover(dead) for dead in taken)))
        return taken

    async def _recover(self, dead: chat_runs.Abandoned) -> None:
        try:
            runner = TurnRunner(
                graph=self.graph, pool=self.pool, run_id=dead.recovery_run_id, spec=TurnSpec.of_abandoned(dead), emit=lambda *_: None
            )
            await runner.recover(dead)
        finally:
            self.recovering.discard(dead.recovery_run_id)

    async def wait_stopped(self, run: chat_runs.RunRow, timeout: float) -> str:
        """After a stop request: wait for the run to end. A run whose worker is dead is taken back
        here and now, as soon as its heartbeat has expired. The run's status at the end."""
        # Long enough for a dead worker's heartbeat to expire: then the answer is "stopped" too.
        deadline = time.monotonic() + max(timeout, chat_runs.STALE_AFTER_SECONDS + 2)
        while True:
            row = await chat_runs.get_run(self.pool, run.run_id)
            if row is None or not row.active:
                return "stopped" if row is not None and row.status == "abandoned" else (row.status if row else "stopped")
            if row.stale:
                taken = await self.reap(row.thread_id)
                if any(d.run_id == run.run_id for d in taken):
                    return "stopped"
            if time.monotonic() >= deadline:
                return row.status
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ heartbeat and stop polling
    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="stop-poller")

    def _beats(self) -> dict[str, str | None]:
        beats: dict[str, str | None] = {}
        for run_id, handle in self.runs.items():
            if handle.runner.aborted:
                continue  # its row must expire, so that a live worker takes the turn back
            parts = handle.runner.streamed
            beats[run_id] = "".join(parts) if len(parts) != self._sent.get(run_id) else None
            self._sent[run_id] = len(parts)
        return beats | {run_id: None for run_id in self.recovering | self.held}

    @property
    def _beating(self) -> bool:
        return bool(self.runs or self.recovering or self.held)

    async def _heartbeat(self, beats: dict[str, str | None]) -> dict[str, str]:
        if self._beat_conn is None:
            self._beat_conn = await psycopg.AsyncConnection.connect(self.pool.conninfo, connect_timeout=2, **CONNECTION_KWARGS)
        return await chat_runs.heartbeat(self._beat_conn, beats)

    async def _poll(self) -> None:
        self._beats_failing_since = None
        while True:
            await self._beat_while_running()
            await self._close_beat_conn()
            # A run launched while the connection closed found this poller not done yet and
            # started none: beat for it too. (No await between this check and the task's end,
            # so no launch can fall between them.)
            if not self._beating:
                return

    async def _beat_while_running(self) -> None:
        while self._beating:
            beats = self._beats()
            try:
                statuses = await asyncio.wait_for(self._heartbeat(beats), HEARTBEAT_TIMEOUT_SECONDS)
            except Exception as exc:
                self._sent.clear()  # send the whole replies again next time
                await self._close_beat_conn()  # broken, or cut mid-statement: connect anew
                self._database_failing(exc)
            else:
                self._beats_failing_since = None
                for run_id, status in statuses.items():
                    if status == "stopping":
                        self.stop_local(run_id)
            await asyncio.sleep(POLL_SECONDS)

    def _database_failing(self, exc: BaseException) -> None:
        now = time.monotonic()
        if self._beats_failing_since is None:
            self._beats_failing_since = now
            log.warning("heartbeat failed: %s", str(exc) or type(exc).__name__)
        if now - self._beats_failing_since >= DATABASE_LOST_SECONDS:
            for handle in list(self.runs.values()):
                if not handle.runner.aborted:
                    log.error("the database has not answered for %.0fs: ending run %s", now - self._beats_failing_since, handle.run_id)
                    handle.runner.abort()

    async def _close_beat_conn(self) -> None:
        conn, self._beat_conn = self._beat_conn, None
        if conn is not None and not conn.closed:
            try:
                await asyncio.wait_for(conn.close(), HEARTBEAT_TIMEOUT_SECONDS)
            except Exception:
                pass

    # ------------------------------------------------------------------ shutdown
    async def close(self) -> None:
        """Stop every reply still running (kept as far as they got, like a user's stop) and wait for the memory updates."""
        if self._reaper is not None:
            self._reaper.cancel()
        handles = list(self.runs.values())
        for handle in handles:
            handle.runner.stop("stopped: the server shut down")
        tasks = [h.task for h in handles if h.task is not None]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_SECONDS)
            for task in pending:
                task.cancel()
        if self._poller is not None:
            self._poller.cancel()
        await self._close_beat_conn()
