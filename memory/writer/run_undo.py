"""What a run's tools wrote to memory, undone when the run is taken back.

A run's reply phase can write memory before the run ends: an approved task change
(``add_task``, ``update_task``, ``complete_task`` after ``/resume``) is applied by the tool,
and the reply goes on streaming. When that run is then taken back (a stop, a failure, a dead
worker's recovery: app.runs.turn_runner), the chat returns to the confirmation and asks it
again, so memory must return to where it was too.

The rule, in one place:

- While a run's reply phase runs, :data:`UNDOABLE_RUN` names it. Every write
  :func:`memory.writer.extraction.apply_extraction` makes then is journaled in the run's row
  (storage.chat_runs.journal_writes) with the value it replaced (None: the item was new),
  in the write's own transaction. A run that is no longer ``running`` (stopped meanwhile,
  taken over, ended) gets no write at all.
- Taking the run back first asks the run's row whether it journaled anything
  (storage.chat_runs.settle_journal, without the user's lock): a run that wrote nothing has its
  journal closed there and is taken back without waiting for the lock. Otherwise it calls
  :func:`undo_run_writes`: in one transaction holding the user's lock (waited for however long a
  forget or a reindex holds it, not timed out), newest first, each item that still holds what the
  run wrote gets its previous value back (an added task is deleted, an updated or completed one is
  as it was). An item changed since by someone else (an edit, a forget) keeps that change. The
  journal is then closed, so a late write of the cancelled run cannot land after it. Until the undo
  has completed the run's row is not ended (ending it clears the journal): a take-back cut short
  leaves it active, and a live worker's reaper takes the run back again, undo included.
- A run that ends any other way (finished, interrupted for the next confirmation) keeps its
  writes; its journal is cleared with the rest of what the row held of the user's words.

A forget (``forget_memory``) is not journaled: it keeps nothing of what it forgot, so it
cannot be undone, and a stopped resume that had forgotten something leaves it forgotten.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, field

from langgraph.store.base import BaseStore, PutOp

from storage import chat_runs
from storage.memory_store import MemoryStore
from storage.user_transaction import user_transaction

log = logging.getLogger(__name__)

UNDOABLE_RUN: ContextVar[str | None] = ContextVar("memory_agent_undoable_run", default=None)
"""The run whose reply phase is running here (set by app.runs.turn_runner); its writes are journaled."""


class RunNotRunning(RuntimeError):
    """The run that would write was stopped, taken over or ended: its write is refused."""


@dataclass
class Undone:
    restored: list[str] = field(default_factory=list)  # "namespace/key" of the items given their previous value back
    removed: list[str] = field(default_factory=list)  # ... of the items the run had added
    kept: list[str] = field(default_factory=list)  # ... of the items changed since by someone else


async def journal(tx: MemoryStore, user_id: str, ops: list[PutOp]) -> None:
    """Journal ``ops`` (about to be written on ``tx``) for the run of :data:`UNDOABLE_RUN`, if any;
    RunNotRunning when that run may no longer write."""
    run_id = UNDOABLE_RUN.get()
    if run_id is None or not ops:
        return
    last: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for op in ops:  # an item written twice in one batch: what it was before the first, what it is after the last
        last[(tuple(op.namespace), op.key)] = op
    entries = []
    for (namespace, key), op in last.items():
        item = await tx.aget(namespace, key)
        entries.append({"user_id": user_id, "namespace": list(namespace), "key": key,
                        "before": item.value if item is not None else None, "after": op.value})
    if not await chat_runs.journal_writes(tx.conn, run_id, entries):
        raise RunNotRunning(f"run {run_id} is no longer running; its write is refused")


async def undo_run_writes(store: BaseStore, user_id: str, run_id: str) -> Undone:
    """Undo what the run's tools wrote (its journal), newest first; then close the journal."""
    done = Undone()
    async with user_transaction(store, user_id) as tx:
        entries = await chat_runs.journaled_writes(tx.conn, run_id)
        for entry in reversed(entries):
            namespace, key = tuple(entry["namespace"]), entry["key"]
            name = f"{namespace[-1]}/{key}"
            if entry.get("user_id") != user_id:
                continue
            item = await tx.aget(namespace, key)
            if (item.value if item is not None else None) != entry["after"]:
                done.kept.append(name)
            elif entry["before"] is None:
                await tx.adelete(namespace, key)
                done.removed.append(name)
            else:
                await tx.aput(namespace, key, entry["before"], index=False)  # (the run's own writes kept the vector too)
                done.restored.append(name)
        await chat_runs.close_journal(tx.conn, run_id)
    if entries:
        log.info("run %s taken back: %d item(s) restored, %d removed, %d changed since kept", run_id, len(done.restored), len(done.removed), len(done.kept))
    return done
