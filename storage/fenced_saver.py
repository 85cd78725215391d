"""The Postgres checkpointer, plus a fence so that a stopped run cannot write after its rollback.

When the task running a turn is cancelled, LangGraph still records the cancelled
node's error as a pending write, from a done-callback that may fire after the run
has exited; that INSERT can be in flight while the rollback
(:func:`storage.checkpoint_rows.rollback_thread`) cleans the thread and land after it.
So taking a turn back goes:

1. :meth:`FencedPostgresSaver.close_thread`: writes of this process to the thread's
   checkpoints newer than the run's starting head (and error writes to the head)
   are dropped from now on, and the writes already in flight are awaited;
2. the rollback deletes what the run wrote;
3. :meth:`FencedPostgresSaver.reopen_thread`: the fence shrinks to the checkpoints the
   rollback removed (ids in ``(head, newest removed]``: ids are time-ordered, so a
   later run's checkpoints are all newer and pass) and expires after ``FENCE_SECONDS``.

The caller reopens in a ``finally`` (app.runs.turn_runner), so a rollback that fails still
lifts the fence; and a closed fence expires by itself after ``CLOSED_FENCE_SECONDS``, so
a caller that never reopens cannot silence a chat for the life of the process.

Fences are per process: the late write comes from the process that ran the turn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from storage.checkpoint_serde import CheckpointSerializer

FENCE_SECONDS = 60.0
# Longer than any wait for in-flight writes plus a rollback (both are seconds at most).
CLOSED_FENCE_SECONDS = 300.0
ERROR_CHANNEL = "__error__"  # the channel LangGraph records a failed or cancelled task's error on
_clock = time.monotonic  # a module attribute, so a test can move fence time alone


@dataclass(frozen=True)
class Fence:
    head: str | None
    newest_blocked: str | None  # None: every checkpoint newer than head
    expires: float

    def blocks_checkpoint(self, checkpoint_id: str | None) -> bool:
        if checkpoint_id is None or (self.head is not None and checkpoint_id <= self.head):
            return False
        return self.newest_blocked is None or checkpoint_id <= self.newest_blocked

    def blocks_writes(self, checkpoint_id: str | None, writes) -> bool:
        if self.blocks_checkpoint(checkpoint_id):
            return True
        return checkpoint_id is not None and checkpoint_id == self.head and all(c == ERROR_CHANNEL for c, _ in writes)


class FencedPostgresSaver(AsyncPostgresSaver):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("serde", CheckpointSerializer())  # every saver of the app's decodes alike (storage.checkpoint_serde)
        super().__init__(*args, **kwargs)
        self._fences: dict[str, Fence] = {}
        self._in_flight: dict[str, int] = {}
        self._idle: dict[str, asyncio.Event] = {}

    # ------------------------------------------------------------------ fences
    async def close_thread(self, thread_id: str, head: str | None) -> None:
        """Drop this process' further writes newer than ``head``; wait for those in flight.

        Call :meth:`reopen_thread` afterwards whatever happens (the fence expires anyway).
        """
        self._fences[thread_id] = Fence(head, None, _clock() + CLOSED_FENCE_SECONDS)
        if self._in_flight.get(thread_id):
            await self._idle.setdefault(thread_id, asyncio.Event()).wait()

    def reopen_thread(self, thread_id: str, head: str | None, removed: list[str]) -> None:
        """Shrink the fence to what the rollback ``removed`` (nothing newer than ``head`` when it failed)."""
        now = _clock()
        self._fences = {t: f for t, f in self._fences.items() if f.expires > now}
        if removed or head is not None:
            self._fences[thread_id] = Fence(head, max(removed) if removed else head, now + FENCE_SECONDS)
        else:
            self._fences.pop(thread_id, None)

    def _fence(self, config) -> tuple[str, str | None, Fence | None]:
        conf = (config or {}).get("configurable", {})
        thread_id = str(conf.get("thread_id"))
        fence = self._fences.get(thread_id)
        if fence is not None and fence.expires < _clock():
            fence = None
        return thread_id, conf.get("checkpoint_id"), fence

    # ------------------------------------------------------------------ tracked writes
    async def _tracked(self, thread_id: str, coro):
        self._in_flight[thread_id] = self._in_flight.get(thread_id, 0) + 1
        self._idle.setdefault(thread_id, asyncio.Event()).clear()
        try:
            return await coro
        finally:
            self._in_flight[thread_id] -= 1
            if not self._in_flight[thread_id]:
                del self._in_flight[thread_id]
                self._idle.pop(thread_id).set()

    async def aput_writes(self, config, writes, task_id, task_path: str = "") -> None:
        thread_id, checkpoint_id, fence = self._fence(config)
        if fence is not None and fence.blocks_writes(checkpoint_id, writes):
            return None
        return await self._tracked(thread_id, super().aput_writes(config, writes, task_id, task_path))

    async def aput(self, config, checkpoint, metadata, new_versions):
        thread_id, parent_id, fence = self._fence(config)
        if fence is not None and fence.blocks_checkpoint(checkpoint["id"]):
            conf = config["configurable"]
            return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", ""), "checkpoint_id": checkpoint["id"]}}
        return await self._tracked(thread_id, super().aput(config, checkpoint, metadata, new_versions))
