"""The turns running in this server process, and how a stop request reaches them.

Each run executes in its own asyncio task, independent of the HTTP request that
started it: a client that disconnects does not cancel its reply (the reply is saved
and shows up when the chat is opened again); only ``/stop`` does.

A stop may arrive at any worker. The worker that receives it marks the run's row
``stopping`` (see :mod:`storage.chat_runs`) and, when the run is its own, stops it at
once. Every worker also polls its own runs' rows every ``POLL_SECONDS`` (refreshing
their heartbeat in the same UPDATE) and stops those marked ``stopping``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field

from app.turn_runner import TurnRunner, TurnSpec
from storage import chat_runs
from memory.chat_admin import ThreadMark, rollback_thread

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
SHUTDOWN_GRACE_SECONDS = 10.0


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RunHandle:
    """A run's events, in order; ``None`` marks the end."""

    run_id: str
    spec: TurnSpec
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None
    runner: TurnRunner | None = None

    def put(self, name: str, data: dict) -> None:
        self.queue.put_nowait((name, data))

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
        self._poller: asyncio.Task | None = None

    async def claim(self, thread_id: str, user_id: str, kind: str) -> str:
        """Claim the thread for a run (RunInProgress when another is active).

        A reply whose worker died mid-way is taken back first, as if it had been stopped,
        so the thread holds no half-done turn. (One that died after its reply was complete
        only missed its memory update, which the next message completes.)
        """
        claim = await chat_runs.start_run(self.pool, thread_id, user_id, kind, self.worker)
        for dead in claim.abandoned:
            if dead.reply_unfinished and dead.head_recorded:
                removed = await rollback_thread(self.pool, ThreadMark(dead.thread_id, dead.head_checkpoint, frozenset(dead.head_writes)))
                log.warning("run %s on thread %s was abandoned by its worker; took back %d checkpoints", dead.run_id, thread_id, len(removed))
        return claim.run_id

    def launch(self, run_id: str, spec: TurnSpec) -> RunHandle:
        handle = RunHandle(run_id, spec)
        handle.runner = TurnRunner(graph=self.graph, pool=self.pool, run_id=run_id, spec=spec, emit=handle.put)
        self.runs[run_id] = handle
        handle.task = asyncio.create_task(self._execute(handle), name=f"turn-{run_id}")
        self._ensure_poller()
        return handle

    async def _execute(self, handle: RunHandle) -> None:
        try:
            await handle.runner.run()
        finally:
            self.runs.pop(handle.run_id, None)
            handle.queue.put_nowait(None)

    def stop_local(self, run_id: str) -> bool:
        handle = self.runs.get(run_id)
        if handle is None:
            return False
        handle.runner.stop()
        return True

    # ------------------------------------------------------------------ polling
    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="stop-poller")

    async def _poll(self) -> None:
        while self.runs:
            try:
                statuses = await chat_runs.heartbeat(self.pool, list(self.runs))
                for run_id, status in statuses.items():
                    if status == "stopping":
                        self.stop_local(run_id)
            except Exception:  # a database hiccup must not end polling for good
                log.exception("polling run statuses failed")
            await asyncio.sleep(POLL_SECONDS)

    # ------------------------------------------------------------------ shutdown
    async def close(self) -> None:
        """Stop every reply still running (kept as far as they got, like a user's stop) and wait for the memory updates."""
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
