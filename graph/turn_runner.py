"""One chat turn of the compiled graph as a stream of events, in two phases.

1. The reply phase runs ``load_context → retrieve → reply ⇄ tools`` and pauses
   before ``summarize`` (a run-time ``interrupt_before``). Reply tokens stream out as
   ``token`` events. This phase can be stopped: the asyncio task running it is
   cancelled and everything the run wrote to the thread is taken back
   (:func:`memory.chat_admin.rollback_thread`), so no partial AI message survives
   and the thread is exactly as it was before the message (the stopped message is
   not kept; the ``error`` event carries its text so a client can offer it again).
2. The commit point: the run's row goes ``running → committing`` (a conditional
   UPDATE, so a stop that won the race is honoured instead), then the memory phase
   runs ``summarize → extract_memories`` under the user's memory write lock and
   cannot be stopped any more: the reply is complete by then.

A reply that ends in a task-change confirmation (an ``interrupt()`` in the tools
node) ends the run with an ``interrupt`` event; ``Command(resume=…)`` continues it
in a new run. A failure in the reply phase is taken back like a stop.

Events: ``token``, ``memory``, ``summary``, ``interrupt``, ``done``, ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from prometheus_client import Counter, Histogram

from graph import metrics
from graph.context import Context
from graph.messages import current_turn, text_of
from llm.text_tool_calls import CallTextFilter
from memory import chat_runs
from memory.chat_admin import ThreadMark, mark_thread, rollback_thread
from memory.user_write_lock import UserWriteLocks

log = logging.getLogger(__name__)

MEMORY_NODES = ("summarize", "extract_memories")
FENCE_WAIT_SECONDS = 10.0

TURN_SECONDS = Histogram(
    "memory_agent_api_turn_seconds",
    "Wall time of a chat turn run through the HTTP API (reply and memory update)",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RUN_OUTCOMES = Counter("memory_agent_api_runs_total", "Runs through the HTTP API by how they ended", ["kind", "outcome"])

Emit = Callable[[str, dict], None]


@dataclass
class TurnSpec:
    thread_id: str
    user_id: str
    persona: str
    kind: str  # message | resume | edit | create
    graph_input: Any  # {"messages": [HumanMessage]} or a Command
    fork_from: dict | None = None  # a checkpoint config to start from (edit)
    user_text: str = ""


def _chunk_text(message: AIMessageChunk) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text")


def _interrupts(state) -> list[dict]:
    return [{"id": i.id, "value": i.value} for i in (state.interrupts or ())]


class TurnRunner:
    def __init__(self, *, graph, pool, locks: UserWriteLocks, run_id: str, spec: TurnSpec, emit: Emit) -> None:
        self.graph = graph
        self.pool = pool
        self.locks = locks
        self.run_id = run_id
        self.spec = spec
        self.emit = emit
        self.stop_requested = False
        self.committed = False  # past the commit point: the reply is complete and stays
        self._reply_task: asyncio.Task | None = None
        self._calls = CallTextFilter()  # tool calls a model wrote as text never reach the client

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.spec.thread_id}}

    def context(self) -> Context:
        return Context(user_id=self.spec.user_id, persona=self.spec.persona)

    def stop(self) -> None:
        """Stop the reply phase (no effect once the reply is complete)."""
        self.stop_requested = True
        if self._reply_task is not None and not self._reply_task.done():
            self._reply_task.cancel()

    # ------------------------------------------------------------------ the run
    async def run(self) -> str:
        """Run the turn; returns the run's final status. Never raises for a failed turn."""
        started = time.perf_counter()
        status = "failed"
        try:
            status = await self._run(started)
            return status
        except Exception as exc:
            log.exception("turn %s failed", self.run_id)
            await chat_runs.finish(self.pool, self.run_id, "failed", detail=f"{type(exc).__name__}: {exc}"[:500])
            if self.committed:  # the reply is complete and saved; the memory update is what failed
                self.emit("error", {"code": "memory_update_failed", "message": f"The reply was saved, but updating memory failed: {exc}"})
            else:
                self.emit("error", {"code": "turn_failed", "message": f"The turn failed: {exc}", "text": self.spec.user_text})
            return status
        finally:
            RUN_OUTCOMES.labels(kind=self.spec.kind, outcome=status).inc()
            # A run that ended any other way than the paths above must not keep the chat locked.
            await asyncio.shield(chat_runs.finish(self.pool, self.run_id, "failed", detail="ended without a final status"))

    async def _run(self, started: float) -> str:
        ctx = self.context()
        if self.spec.kind == "message":
            await self._finish_pending_memory_update(ctx)
        mark = await mark_thread(self.pool, self.spec.thread_id)
        await chat_runs.record_head(self.pool, self.run_id, mark.checkpoint_id, sorted(mark.head_writes))
        if self.stop_requested:
            return await self._take_back(mark, "stopped")

        self._reply_task = asyncio.create_task(self._reply_phase(ctx))
        try:
            await self._reply_task
        except asyncio.CancelledError:
            if not self.stop_requested:
                raise  # this run itself was cancelled (server shutdown)
            return await self._take_back(mark, "stopped")
        except Exception as exc:
            log.exception("reply phase of run %s failed", self.run_id)
            return await self._take_back(mark, "failed", exc)
        if self.stop_requested:
            return await self._take_back(mark, "stopped")

        state = await self.graph.aget_state(self.config)
        if state.values.get("error"):  # load_context refused the message and removed it again
            await chat_runs.finish(self.pool, self.run_id, "failed", detail=state.values["error"])
            self.emit("error", {"code": "refused", "message": state.values["error"]})
            return "failed"
        if state.interrupts:
            if not await chat_runs.transition(self.pool, self.run_id, "interrupted", when=("running",)):
                return await self._take_back(mark, "stopped")
            self.emit("interrupt", {"run_id": self.run_id, "interrupts": _interrupts(state)})
            return "interrupted"
        if not await chat_runs.transition(self.pool, self.run_id, "committing", when=("running",)):
            return await self._take_back(mark, "stopped")
        self.committed = True

        await self._memory_phase(ctx, forward=True)
        state = await self.graph.aget_state(self.config)
        await chat_runs.finish(self.pool, self.run_id, "finished")
        elapsed = time.perf_counter() - started
        TURN_SECONDS.labels(kind=self.spec.kind).observe(elapsed)
        metrics.TURNS.inc()
        self.emit("done", self._done_payload(state.values, elapsed))
        return "finished"

    # ------------------------------------------------------------------ phases
    async def _reply_phase(self, ctx: Context) -> None:
        config = self.spec.fork_from or self.config
        async for mode, chunk in self.graph.astream(
            self.spec.graph_input,
            config,
            context=ctx,
            stream_mode=["messages", "custom"],
            interrupt_before=["summarize"],
        ):
            self._forward(mode, chunk)
        if text := self._calls.finish():
            self.emit("token", {"text": text})

    async def _memory_phase(self, ctx: Context, *, forward: bool) -> None:
        async with self.locks.hold(self.spec.user_id):
            async for mode, chunk in self.graph.astream(None, self.config, context=ctx, stream_mode=["custom"]):
                if forward:
                    self._forward(mode, chunk)

    async def _finish_pending_memory_update(self, ctx: Context) -> None:
        """A worker that died between reply and memory update left the thread paused
        before summarize: finish that turn's memory update before the new one starts."""
        state = await self.graph.aget_state(self.config)
        if state.next and not state.interrupts and set(state.next) <= set(MEMORY_NODES):
            log.info("thread %s: finishing an earlier turn's memory update", self.spec.thread_id)
            await self._memory_phase(ctx, forward=False)

    def _forward(self, mode: str, chunk: Any) -> None:
        if mode == "messages":
            message, meta = chunk
            if meta.get("langgraph_node") == "reply" and isinstance(message, AIMessageChunk):
                text = self._calls.feed(message.id, _chunk_text(message))
                if text:
                    self.emit("token", {"text": text})
        elif mode == "custom" and isinstance(chunk, dict) and chunk.get("event") in ("memory", "summary"):
            self.emit(chunk["event"], {k: v for k, v in chunk.items() if k != "event"})

    # ------------------------------------------------------------------ endings
    async def _take_back(self, mark: ThreadMark, status: str, exc: Exception | None = None) -> str:
        # Late writes of the cancelled node must not land after the rollback (memory.fenced_saver).
        saver = getattr(self.graph, "checkpointer", None)
        fenced = hasattr(saver, "close_thread")
        if fenced:
            await asyncio.wait_for(saver.close_thread(self.spec.thread_id, mark.checkpoint_id), FENCE_WAIT_SECONDS)
        removed = await asyncio.shield(rollback_thread(self.pool, mark))
        if fenced:
            saver.reopen_thread(self.spec.thread_id, mark.checkpoint_id, removed)
        detail = "stopped by the user" if status == "stopped" else f"{type(exc).__name__}: {exc}"[:500]
        await chat_runs.finish(self.pool, self.run_id, status, detail=detail)
        log.info("run %s %s; took back %d checkpoints", self.run_id, status, len(removed))
        if status == "stopped":
            self.emit(
                "error",
                {
                    "code": "stopped",
                    "message": "Stopped. The reply was discarded and the chat is as it was before this message.",
                    "text": self.spec.user_text,
                },
            )
        else:
            self.emit(
                "error",
                {"code": "reply_failed", "message": f"The reply failed and was discarded: {exc}", "text": self.spec.user_text},
            )
        return status

    def _done_payload(self, values: dict, elapsed: float) -> dict:
        human, reply = current_turn(values.get("messages", []))
        usage = values.get("turn_usage") or {}
        return {
            "run_id": self.run_id,
            "message_id": reply.id if isinstance(reply, AIMessage) else None,
            "user_message_id": human.id if isinstance(human, HumanMessage) else None,
            "reply": text_of(reply) if reply is not None else "",
            "usage": usage,
            "tokens_in": usage.get("input_tokens", 0),
            "tokens_out": usage.get("output_tokens", 0),
            "memory_written": values.get("memory_written") or {},
            "elapsed_ms": round(elapsed * 1000, 1),
        }
