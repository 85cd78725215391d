"""One chat turn of the compiled graph as a stream of events, in two phases.

1. The reply phase (``graph.assembly.REPLY_PHASE``: ``load_context → retrieve → reply ⇄ tools``)
   runs and pauses at the graph's commit point (``interrupt_before=[COMMIT_POINT]``, the memory
   phase's first node). Reply tokens stream out as
   ``token`` events. This phase can be stopped: the asyncio task running it is
   cancelled and everything the run wrote to the thread is taken back
   (:func:`storage.checkpoint_rows.rollback_thread`). Then the stopped turn is written
   back whole: the user's message plus the reply as far as it had streamed, marked
   stopped (:func:`core.messages.stopped_reply`), and the memory phase runs for it.
   The rule for what memory learns from a stopped turn: nothing. ``extract_memories``
   skips a stopped reply (no profile, preference, fact or task comes from it); the
   chat itself keeps it (history, title, summary, search), like any other message.
   Regenerating the reply makes it a complete turn, which memory learns from.
   (A stopped answer to a confirmation, ``/resume``, is taken back whole instead: the
   confirmation is asked again, and what its approved tool wrote to memory is undone,
   as on every take-back: :mod:`memory.writer.run_undo`.)
2. The commit point: the run's row goes ``running → committing`` (a conditional
   UPDATE, so a stop that won the race is honoured instead), then the memory phase
   (``graph.assembly.MEMORY_PHASE``: ``summarize → record_chat → index_messages →
   extract_memories``) runs under the user's memory write lock and
   cannot be stopped any more: the reply is complete by then.

A reply that ends in a task-change confirmation (an ``interrupt()`` in the tools
node) ends the run with an ``interrupt`` event; ``Command(resume=…)`` continues it
in a new run. A failure in the reply phase is taken back entirely (the ``error`` event
carries the message's text so a client can offer it again). A run that ends without the memory
phase (a confirmation, a take-back) leaves the thread's head redacted with the user's forgets
(a forget committed while it ran rewrote the head it started from, not what it then wrote).

Streams always end: every database step of the bookkeeping runs under
``DB_STEP_SECONDS``, and when the database stops answering altogether the worker's
heartbeat notices within seconds and :meth:`TurnRunner.abort` sends ``error`` at once.
What such a run leaves behind is finished by a live worker once the database answers
(:meth:`TurnRunner.recover`, the same take-back as a stop: the turn is kept, its reply
marked stopped, as far as the last heartbeat saved it).

Events: ``token``, ``memory``, ``summary``, ``interrupt``, ``done``, ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import psycopg
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langgraph.types import Interrupt, StateSnapshot
from prometheus_client import Counter, Histogram

from core import metrics
from core.context import Context
from core.messages import current_turn, sent_at, stamp_sent_at, stopped_reply
from embeddings.batching import in_background
from graph.assembly import COMMIT_POINT, MEMORY_PHASE, reply_phase_durability
from storage import chat_runs, owner_forgets
from llm.reply_checks import Said
from llm.text_tool_calls import CallTextFilter
from storage.checkpoint_rows import ThreadMark, mark_thread, rollback_thread
from memory.chat_admin import write_empty_chat
from memory.forgetting import redact_head
from memory.queries import redactor_for
from memory.writer.extraction import retract_taught_by
from memory.writer.records import retitle_from_opening
from memory.writer.run_undo import UNDOABLE_RUN, undo_run_writes

log = logging.getLogger(__name__)

# What a database that went away raises: a take-back that meets it is left for a live worker to redo.
UNREACHABLE = (OSError, TimeoutError, asyncio.TimeoutError, psycopg.OperationalError, psycopg.InterfaceError)

FENCE_WAIT_SECONDS = 10.0
# One bookkeeping step (a run row update, a rollback): past this the database is taken for
# gone and the step for failed; what it left undone is a live worker's reaper's job.
DB_STEP_SECONDS = 5.0
T = TypeVar("T")

TURN_SECONDS = Histogram(
    "memory_agent_api_turn_seconds",
    "Wall time of a chat turn run through the HTTP API (reply and memory update)",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RUN_OUTCOMES = Counter("memory_agent_api_runs_total", "Runs through the HTTP API by how they ended", ["kind", "outcome"])

Emit = Callable[[str, dict], None]

STOPPED_KEPT = "Stopped. The reply so far is kept, marked as stopped; memory learns nothing from a stopped turn (regenerate it to have it learned)."
STOPPED_DISCARDED = "Stopped. The reply was discarded and the chat is as it was before."
DATABASE_LOST = (
    "The database stopped answering during this reply. Once it is back, the chat keeps your message "
    "and the reply as far as it got, marked as stopped (memory learns nothing from it)."
)
DATABASE_LOST_UNSAVED = "The database stopped answering before your message was saved; send it again once the database is back."
DATABASE_LOST_COMMITTED = "The reply was saved, but the database stopped answering during the memory update; it is completed once the database is back."
WORKER_DIED = "stopped: its worker stopped answering"


@dataclass
class TurnSpec:
    thread_id: str
    user_id: str
    persona: str
    kind: str  # message | resume | edit | regenerate | create
    graph_input: Any  # {"messages": [HumanMessage]} or a Command
    fork_from: dict | None = None  # a checkpoint config to start from (edit)
    user_text: str = ""
    context: dict = field(default_factory=dict)  # Context fields besides user and persona (the CLI's --model)
    # The thread's state as the entry point read it while holding the run slot, so nothing changed
    # it since: the runner's first look at the thread uses it instead of reading it again.
    head: StateSnapshot | None = None

    def recorded(self) -> chat_runs.RecordedTurn:
        """What another worker needs to keep this turn as a stopped one if this worker dies."""
        messages = self.graph_input.get("messages") if isinstance(self.graph_input, dict) else None
        human = messages[-1] if messages else None
        fork = (self.fork_from or {}).get("configurable", {}).get("checkpoint_id")
        return chat_runs.RecordedTurn(
            persona=self.persona,
            message_id=human.id if human is not None else None,
            text=human.text if human is not None else "",
            sent_at=sent_at(human) if human is not None else None,
            fork_checkpoint=fork,
        )

    @classmethod
    def of_abandoned(cls, dead: chat_runs.Abandoned) -> "TurnSpec":
        """The turn a dead worker's run was answering, as it recorded it."""
        turn = dead.turn or chat_runs.RecordedTurn()
        fork = None
        if turn.fork_checkpoint:
            fork = {"configurable": {"thread_id": dead.thread_id, "checkpoint_ns": "", "checkpoint_id": turn.fork_checkpoint}}
        graph_input = {"messages": [stamp_sent_at(HumanMessage(turn.text, id=turn.message_id), turn.sent_at)]} if turn.message_id else None
        return cls(dead.thread_id, dead.user_id, turn.persona, dead.kind, graph_input, fork_from=fork, user_text=turn.text)


def _chunk_text(message: AIMessageChunk) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text")


def _interrupts(interrupts: Sequence[Interrupt]) -> list[dict]:
    return [{"id": i.id, "value": i.value} for i in interrupts]


class TurnRunner:
    def __init__(self, *, graph, pool, run_id: str, spec: TurnSpec, emit: Emit, on_recorded: Callable[[], None] | None = None) -> None:
        self.graph = graph
        self.pool = pool
        self.run_id = run_id
        self.spec = spec
        self.emit = emit
        self.on_recorded = on_recorded  # called once the turn is recorded (a live worker can keep it from then on)
        self.stop_requested = False
        self.stop_reason = "stopped by the user"
        self.committed = False  # past the commit point: the reply is complete and stays
        self.streamed: list[str] = []  # the reply's text so far, kept if the user stops it
        self.failure: BaseException | None = None  # what made the run fail, for callers that explain it
        self.aborted = False
        self.head_recorded = False  # from here on a live worker can keep the turn if this one cannot
        # A take-back began and the run's journaled writes are not undone yet: its row must not end
        # (ending it clears the journal); left active, a live worker's reaper takes it back again.
        self.undo_pending = False
        # Set at the commit point: the reply is complete and saved, only the memory phase is left
        # (the CLI shows the reply then and takes the next message while memory work finishes).
        self.replied = asyncio.Event()
        self.reply_text = ""
        self._reply_task: asyncio.Task | None = None
        self._main: asyncio.Task | None = None
        self._calls = CallTextFilter()  # tool calls a model wrote as text never reach the client
        # The text shown for the reply node's current run (its task), whose answer the node may still
        # replace: a repeat let out of the hold, a retry after an empty answer (see _reply_phase's end).
        self._node_task: str | None = None
        self._node_shown: list[str] = []

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.spec.thread_id}}

    def context(self) -> Context:
        return Context(**{"user_id": self.spec.user_id, "persona": self.spec.persona, **self.spec.context})

    def stop(self, reason: str = "stopped by the user") -> None:
        """Stop the reply phase (no effect once the reply is complete)."""
        self.stop_requested = True
        self.stop_reason = reason
        if self._reply_task is not None and not self._reply_task.done():
            self._reply_task.cancel()

    def abort(self) -> None:
        """The database stopped answering: say so now and end the run. Its row is left as it is;
        once the database is back a live worker takes the turn back as a stopped one (:meth:`recover`),
        or completes its memory update if the reply was already complete."""
        if self.aborted:
            return
        self.aborted = True
        if self.committed:
            self.emit("error", {"code": "database_unavailable", "message": DATABASE_LOST_COMMITTED})
        else:
            message = DATABASE_LOST if self.head_recorded else DATABASE_LOST_UNSAVED
            self.emit("error", {"code": "database_unavailable", "message": message, "text": self.spec.user_text})
        if self._main is not None:
            self._main.cancel()

    async def _step(self, work: Awaitable[T]) -> T:
        """A bookkeeping step under DB_STEP_SECONDS (TimeoutError past it)."""
        return await asyncio.wait_for(work, DB_STEP_SECONDS)

    async def _finish_row(self, status: str, detail: str | None = None) -> None:
        """Record the run's final status; a database that does not answer leaves it to the reaper.
        So does a take-back whose undo did not complete: ending the row would drop its journal."""
        if self.undo_pending:
            log.warning("run %s: its writes are not undone yet; its row stays for a live worker's reaper to take it back", self.run_id)
            return
        try:
            await self._step(chat_runs.finish(self.pool, self.run_id, status, detail=detail))
        except Exception as exc:
            log.warning("run %s: could not record %s (%s); a live worker's reaper will", self.run_id, status, exc)

    # ------------------------------------------------------------------ the run
    async def run(self) -> str:
        """Run the turn; returns the run's final status. Never raises for a failed turn."""
        started = time.perf_counter()
        status = "failed"
        self._main = asyncio.create_task(self._run(started))
        try:
            status = await self._main
            return status
        except asyncio.CancelledError:
            if not self.aborted:
                raise  # this run itself was cancelled (server shutdown)
            return status  # abort() has told the client; the row stays for the reaper
        except Exception as exc:
            log.exception("turn %s failed", self.run_id)
            self.failure = exc
            # The event first: its words do not depend on the bookkeeping after it.
            if self.committed:  # the reply is complete and saved; the memory update is what failed
                self.emit("error", {"code": "memory_update_failed", "message": f"The reply was saved, but updating memory failed: {exc}"})
            else:
                self.emit("error", {"code": "turn_failed", "message": f"The turn failed: {exc}", "text": self.spec.user_text})
            await self._finish_row("failed", detail=f"{type(exc).__name__}: {exc}"[:500])
            return status
        finally:
            RUN_OUTCOMES.labels(kind=self.spec.kind, outcome=status).inc()
            # A run that ended any other way than the paths above must not keep the chat locked
            # (an aborted one keeps its row active on purpose: the reaper takes it back).
            if not self.aborted:
                await asyncio.shield(self._finish_row("failed", detail="ended without a final status"))

    async def _run(self, started: float) -> str:
        ctx = self.context()
        if self.spec.kind == "message":
            await self._finish_pending_memory_update(ctx, self.spec.head)
        opening_before, branch_before = await self._opening_and_ids() if self.spec.fork_from else (None, set())
        mark = await self._step(mark_thread(self.pool, self.spec.thread_id))
        if mark.checkpoint_id is None and self.spec.fork_from is None:
            # A chat made without POST /chats (the CLI's, a new thread id): its empty checkpoint
            # first, the first message's fork point, so this turn too is saved once where it stops.
            mark = ThreadMark(self.spec.thread_id, await self._step(write_empty_chat(self.graph, self.spec.thread_id)))
        await self._step(chat_runs.record_head(self.pool, self.run_id, mark.checkpoint_id, sorted(mark.head_writes), self.spec.recorded()))
        self.head_recorded = True
        if self.on_recorded is not None:
            self.on_recorded()
        if self.stop_requested:
            return await self._take_back(mark, "stopped")

        self._reply_task = asyncio.create_task(self._reply_phase(ctx, first_turn=mark.checkpoint_id is None))
        try:
            values, interrupts = await self._reply_task
        except asyncio.CancelledError:
            if not self.stop_requested:
                raise  # this run itself was cancelled (server shutdown)
            return await self._take_back(mark, "stopped")
        except Exception as exc:
            log.exception("reply phase of run %s failed", self.run_id)
            self.failure = exc
            return await self._take_back(mark, "failed", exc)
        if self.stop_requested:
            return await self._take_back(mark, "stopped")

        if values.get("error"):  # load_context refused the message and removed it again
            await self._finish_row("failed", detail=values["error"])
            self.emit("error", {"code": "refused", "message": values["error"]})
            return "failed"
        if interrupts:
            await self._redact_head()
            if not await self._step(chat_runs.transition(self.pool, self.run_id, "interrupted", when=("running",))):
                return await self._take_back(mark, "stopped")
            self.emit("interrupt", {"run_id": self.run_id, "interrupts": _interrupts(interrupts)})
            return "interrupted"
        if not await self._step(chat_runs.transition(self.pool, self.run_id, "committing", when=("running",))):
            return await self._take_back(mark, "stopped")
        self.committed = True
        _, reply = current_turn(values.get("messages", []))
        self.reply_text = reply.text if reply is not None else ""
        self.replied.set()

        if branch_before:  # an edit or a regeneration: undo what only the abandoned branch taught,
            # before this branch's memory update, so what it teaches is not taken for a duplicate of that.
            abandoned = sorted(branch_before - (await self._opening_and_ids())[1])
            retracted = await retract_taught_by(self.graph.store, self.spec.user_id, abandoned)
            if opening_before in abandoned:  # the opening was edited: the title it gave is made again from the new one
                await retitle_from_opening(self.graph.store, self.spec.user_id, self.spec.thread_id)
            if retracted.facts or retracted.tasks or retracted.fields:
                self.emit("memory", {"retracted": {"facts": retracted.facts, "tasks": retracted.tasks, "fields": retracted.fields}})
        values = await self._memory_phase(ctx, forward=True) or values  # (a phase that changed nothing leaves them as they were)
        await self._finish_row("finished")
        elapsed = time.perf_counter() - started
        TURN_SECONDS.labels(kind=self.spec.kind).observe(elapsed)
        metrics.TURNS.inc()
        self.emit("done", self._done_payload(values, elapsed))
        return "finished"

    async def _opening_and_ids(self) -> tuple[str | None, set[str]]:
        """The id of the chat's first user message, and the ids of all its messages."""
        messages = (await self.graph.aget_state(self.config)).values.get("messages", [])
        return next((m.id for m in messages if isinstance(m, HumanMessage)), None), {m.id for m in messages if m.id}

    # ------------------------------------------------------------------ phases
    async def _reply_phase(self, ctx: Context, *, first_turn: bool = False) -> tuple[dict, list[Interrupt]]:
        """Stream the reply; the thread's values where the phase stopped, and the interrupts it raised.

        They come from the stream's ``values`` chunks (the state after each step, in memory), so
        the run does not read the checkpoint back from the database to learn how the phase ended. It is saved as
        ``graph.assembly.reply_phase_durability`` says: once, where it stops (every chat run here has a
        checkpoint before its first turn: ``memory.chat_admin.write_empty_chat``)."""
        config = self.spec.fork_from or self.config
        values: dict = {}
        interrupts: list[Interrupt] = []
        # What the phase's tools write to memory is journaled under this run: taking it back undoes it.
        # (This task's own copy of the context: the memory phase, run outside it, is not journaled.)
        UNDOABLE_RUN.set(self.run_id)
        async for mode, chunk in self.graph.astream(
            self.spec.graph_input,
            config,
            context=ctx,
            stream_mode=["messages", "custom", "values"],
            interrupt_before=[COMMIT_POINT],
            durability=reply_phase_durability(first_turn),
        ):
            if mode == "values":
                # An interrupt() arrives as the values with "__interrupt__" (langgraph's stream);
                # a step's values may follow it, so they are gathered, not taken from the last chunk.
                interrupts += chunk.get("__interrupt__", ())
                values = {k: v for k, v in chunk.items() if k != "__interrupt__"}
            else:
                self._forward(mode, chunk)
        self._show(self._calls.finish())
        if not values:  # steps that wrote nothing stream no values: then the checkpoint says
            state = await self.graph.aget_state(self.config)
            values, interrupts = dict(state.values), list(state.interrupts)
        if not interrupts:
            self._correct_shown(values.get("messages", []))
        return values, interrupts

    def _show(self, text: str) -> None:
        if text:
            self.streamed.append(text)
            self._node_shown.append(text)
            self.emit("token", {"text": text})

    def _node_run(self, task: str | None) -> None:
        """The reply node began a run (its first try, or its answer after a tool step): what is
        still held of the previous one's message is let out, and its shown text starts afresh."""
        self._show(self._calls.finish())
        self._node_task, self._node_shown = task, []

    def _correct_shown(self, messages: list) -> None:
        """When the reply the node kept is not what its run streamed (it replaced an answer already
        shown, or nothing was shown of it), a ``replaced`` event gives the stored text: the client
        shows that in place of ``withdrawn``, the text streamed since that run began."""
        if self._node_task is None or not messages or not isinstance(messages[-1], AIMessage) or messages[-1].tool_calls:
            return
        shown, final = "".join(self._node_shown), messages[-1].text
        if " ".join(shown.split()) == " ".join(final.split()):
            return
        if shown and "".join(self.streamed).endswith(shown):
            self.streamed[:] = ["".join(self.streamed)[: -len(shown)]]
        self.streamed.append(final)
        self._node_shown = [final]
        self.emit("replaced", {"text": final, "withdrawn": shown})

    async def _memory_phase(self, ctx: Context, *, forward: bool) -> dict:
        """Run the memory phase; the thread's values after it ({} when it changed none)."""
        # The memory writer serializes this user's writes itself (storage.user_transaction).
        values: dict = {}
        # Nobody waits on its embeddings as on a reply's: under load they take the CPU the replies leave.
        with in_background():
            async for mode, chunk in self.graph.astream(None, self.config, context=ctx, stream_mode=["custom", "values"]):
                if mode == "values":
                    values = chunk
                elif forward:
                    self._forward(mode, chunk)
        return values

    async def _redact_head(self) -> None:
        """The thread's head without what the user's forgets hide, for a run that ends without the
        memory phase (which redacts the state it leaves: summarize, extract_memories). A forget
        committed while the reply ran rewrote the head the run started from, but the run's own
        checkpoint came from the values it held in memory. (The ledger is read after that checkpoint
        was written: a forget committed later rewrites it itself.) A take-back returns to the head
        the run started from, which a forget meanwhile rewrote unless the run had written a newer
        checkpoint by then (a failed run may save where it failed): that one the forget rewrote is
        gone, so the head is redacted there too."""
        try:
            redactor = await self._step(redactor_for(self.graph.store, self.spec.user_id))
            if redactor:
                await self._step(redact_head(self.graph.store, self.spec.thread_id, redactor))
        except Exception as exc:  # (what is shown of the state is redacted anyway: forgetting.shown_state)
            log.warning("run %s: could not redact the head of thread %s (%s)", self.run_id, self.spec.thread_id, exc)

    async def _finish_pending_memory_update(self, ctx: Context, head: StateSnapshot | None = None) -> None:
        """A worker that died between reply and memory update left the thread paused
        at the commit point or inside the memory phase: finish that turn's memory update before
        the new one starts. ``head``: the thread's state when the caller has just read it."""
        state = head or await self.graph.aget_state(self.config)
        if state.next and not state.interrupts and set(state.next) <= set(MEMORY_PHASE):
            log.info("thread %s: finishing an earlier turn's memory update", self.spec.thread_id)
            await self._memory_phase(ctx, forward=False)

    def _forward(self, mode: str, chunk: Any) -> None:
        if mode == "messages":
            message, meta = chunk
            if meta.get("langgraph_node") == "reply" and isinstance(message, AIMessageChunk):
                task = meta.get("langgraph_checkpoint_ns")
                if task != self._node_task:
                    self._node_run(task)
                self._show(self._calls.feed(message.id, _chunk_text(message)))
        elif mode == "custom" and isinstance(chunk, dict) and chunk.get("event") == "reply_check":
            self._node_run("checked")  # (sent before the node's first token; that token names its task)
            self._calls.expect(Said(**chunk["said"]))  # an echo of the user is held out of the stream
        elif mode == "custom" and isinstance(chunk, dict) and chunk.get("event") in ("memory", "summary"):
            self.emit(chunk["event"], {k: v for k, v in chunk.items() if k != "event"})

    # ------------------------------------------------------------------ endings
    async def _take_back(self, mark: ThreadMark, status: str, exc: Exception | None = None) -> str:
        # A clean-up: not refused when the user was forgotten since the run began (forget-me stops
        # the run, then deletes what it kept: storage.owner_forgets).
        with owner_forgets.no_caller():
            return await self._taking_back(mark, status, exc)

    async def _taking_back(self, mark: ThreadMark, status: str, exc: Exception | None = None) -> str:
        # Late writes of the cancelled node must not land after the rollback (storage.fenced_saver).
        saver = getattr(self.graph, "checkpointer", None)
        fenced = hasattr(saver, "close_thread")
        removed: list[str] = []
        try:
            if fenced:
                await asyncio.wait_for(saver.close_thread(self.spec.thread_id, mark.checkpoint_id), FENCE_WAIT_SECONDS)
            # (A rollback cut by the timeout is one transaction: it happened whole or not at all.)
            removed = await self._step(asyncio.shield(rollback_thread(self.pool, mark)))
        finally:
            # Whatever happened, lift the fence: left closed it would drop every later checkpoint
            # of this chat in this process. After a failed rollback nothing was removed, so
            # nothing newer than the head stays fenced.
            if fenced:
                saver.reopen_thread(self.spec.thread_id, mark.checkpoint_id, removed)
        log.info("run %s %s; took back %d checkpoints", self.run_id, status, len(removed))
        # And memory: what the run's tools wrote (an approved task change) gets its previous value back.
        await self._undo_writes()
        await self._redact_head()
        if status == "stopped":
            kept = await self._keep_stopped_turn(mark)
            await self._finish_row(status, detail=self.stop_reason)
            if kept is not None:
                self.emit("error", {"code": "stopped", "message": STOPPED_KEPT, **kept})
            else:
                self.emit("error", {"code": "stopped", "message": STOPPED_DISCARDED, "text": self.spec.user_text})
            return status
        await self._finish_row(status, detail=f"{type(exc).__name__}: {exc}"[:500])
        self.emit("error", {"code": "reply_failed", "message": f"The reply failed and was discarded: {exc}", "text": self.spec.user_text})
        return status

    async def _undo_writes(self) -> None:
        """Undo what the run's tools wrote (memory.writer.run_undo). A run that journaled nothing
        (learnt without the user's lock) has nothing to undo. Else the undo waits for the user's lock
        however long another writer (a forget, a reindex) holds it: not timed out, and shielded, so it
        completes (a database gone altogether is the heartbeat's to notice: :meth:`abort`). Until it
        has, the row is not ended (:attr:`undo_pending`)."""
        self.undo_pending = True
        try:
            if await self._step(chat_runs.settle_journal(self.pool, self.run_id)):
                await asyncio.shield(undo_run_writes(self.graph.store, self.spec.user_id, self.run_id))
        except UNREACHABLE:
            raise  # the database went away: the row stays active, and a live worker redoes this
        except Exception:
            # Anything else would fail again at every retry, and the chat would refuse every message
            # meanwhile: the run ends, the write stays, and the log says which run it was.
            log.exception("run %s: what its tools wrote could not be undone; it stays", self.run_id)
        self.undo_pending = False

    async def _keep_stopped_turn(self, mark: ThreadMark) -> dict | None:
        """Write the stopped turn back (its message, the reply so far marked stopped) and run
        the memory phase for it, which teaches memory nothing from a stopped reply."""
        messages = self.spec.graph_input.get("messages") if isinstance(self.spec.graph_input, dict) else None
        if not messages:  # a stopped /resume: its confirmation stays pending, asked again
            return None
        human = messages[-1]
        reply = stopped_reply("".join(self.streamed), str(uuid.uuid4()))
        # As if `reply` had answered the message: on the edit's fork point, or the head the rollback
        # returned to (a chat's first turn: its empty checkpoint, written before the turn began).
        if self.spec.fork_from is None and mark.checkpoint_id is None:
            # A run recorded before chats had one (a dead worker's, taken back after an upgrade):
            # the empty checkpoint now, so the message can still be edited or its reply regenerated.
            await write_empty_chat(self.graph, self.spec.thread_id)
        await self.graph.aupdate_state(self.spec.fork_from or self.config, {"messages": [human, reply]}, as_node="reply")
        await self._memory_phase(self.context(), forward=False)
        return {"message_id": reply.id, "user_message_id": human.id, "reply": reply.text}

    # ------------------------------------------------------------------ a dead worker's run
    async def recover(self, dead: chat_runs.Abandoned) -> str:
        """Finish what a dead worker's run left (this runner's ``run_id`` is the recover run
        holding the thread): a reply cut short is taken back and kept as a stopped turn, exactly
        as a user's stop keeps it, with the reply as far as its last heartbeat saved it; a
        complete reply gets the memory update it missed."""
        self.stop_requested, self.stop_reason = True, WORKER_DIED
        try:
            if dead.reply_unfinished and dead.head_recorded:
                self.streamed = [dead.partial_reply]
                mark = ThreadMark(dead.thread_id, dead.head_checkpoint, frozenset(dead.head_writes))
                status = await self._take_back(mark, "stopped")
                log.warning("run %s on thread %s was abandoned by its worker; its turn is kept as a stopped one", dead.run_id, dead.thread_id)
                return status
            # Nothing of its reply was written yet, or the reply was complete: only a memory update may be missing.
            await self._finish_pending_memory_update(self.context())
            await self._finish_row("finished", detail=f"took over run {dead.run_id}")
            return "finished"
        except Exception as exc:
            log.exception("taking back run %s failed", dead.run_id)
            await self._finish_row("failed", detail=f"{type(exc).__name__}: {exc}"[:500])
            return "failed"

    def _done_payload(self, values: dict, elapsed: float) -> dict:
        human, reply = current_turn(values.get("messages", []))
        usage = values.get("turn_usage") or {}
        return {
            "run_id": self.run_id,
            "message_id": reply.id if isinstance(reply, AIMessage) else None,
            "user_message_id": human.id if isinstance(human, HumanMessage) else None,
            "reply": reply.text if reply is not None else "",
            "usage": usage,
            "tokens_in": usage.get("input_tokens", 0),
            "tokens_out": usage.get("output_tokens", 0),
            "memory_written": values.get("memory_written") or {},
            "elapsed_ms": round(elapsed * 1000, 1),
        }
