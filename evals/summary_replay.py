"""Replay a conversation through the production ``summarize`` node and the nodes after it
that keep the chat's record and index (``SUMMARY_NODES``), turn by turn.

The chat graph runs them once per user turn, after the reply; the
replay does the same: messages are appended in dataset order (see
``conversation_replay``) and the nodes run after every assistant message, with
the state carried over from the previous run (``summary``,
``summarized_through``, ``summary_folds``). The node decides by itself when to
fold (``nodes.compaction.plan_fold``: window, tail, token budget), calls
``memory.summarizer.fold_summary`` with ``Context.summary_prompt``, re-compresses
past ``max_summary_tokens``; ``record_chat`` keeps the chat record (title, searchable text)
in the store — nothing here re-implements any of that.

Closing fold (on by default): in production the newest ``tail`` messages stay
raw, so the summary alone never covers the end of a conversation. To score the
summary of the *whole* conversation, one last run appends a marker user message
and runs the same node with ``summary_window = tail_size = 1``, which folds
everything before the marker. It is counted as a fold like the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from langchain_core.messages import BaseMessage, HumanMessage

from evals.conversation_replay import replay_turns
from evals.datasets.schema import Conversation
from evals.metered_model import CallMeter, CallRecord
from evals.production_nodes import nodes_graph
from graph.assembly import MEMORY_PHASE
from core.context import Context
from core.schemas import SummaryBoard
from core.state import LAST_NODE

__all__ = ["CLOSING_MARKER", "FoldRecord", "SummaryReplay", "replay_summaries"]

CLOSING_MARKER = "[end of conversation]"
FOLD_KINDS = ("fold", "recompress")
SUMMARY_NODES = MEMORY_PHASE[: MEMORY_PHASE.index(LAST_NODE)]
"""The memory phase up to what memory learns (the extraction eval's part): fold, record, index."""


@dataclass
class FoldRecord:
    index: int  # 1-based
    after_message: int  # messages in the history when it ran
    node_seconds: float  # wall time of the SUMMARY_NODES run that folded
    calls: list[CallRecord]  # fold and recompress calls of that run (repairs included)
    board: dict[str, Any]
    closing: bool = False

    @property
    def model_seconds(self) -> float:
        return sum(c.seconds for c in self.calls)


@dataclass
class SummaryReplay:
    conversation_id: str
    variant: str
    messages: list[BaseMessage]
    folds: list[FoldRecord]
    calls: list[CallRecord]  # every metered call (fold, recompress, title, ...)
    node_runs: int
    wall_seconds: float
    errors: list[str] = field(default_factory=list)  # folds the node skipped (invalid model output)

    @property
    def final_board(self) -> SummaryBoard:
        return SummaryBoard.model_validate(self.folds[-1].board) if self.folds else SummaryBoard()


async def _run_node(graph, state: dict, ctx: Context, thread_id: str, errors: list[str]) -> dict:
    values: dict = {}
    async for mode, chunk in graph.astream(
        state, {"configurable": {"thread_id": thread_id}}, context=ctx, stream_mode=["values", "custom"]
    ):
        if mode == "values":
            values = chunk
        elif isinstance(chunk, dict) and chunk.get("event") == "summary" and chunk.get("error"):
            errors.append(str(chunk["error"]))
    return values


async def replay_summaries(
    conversation: Conversation,
    *,
    context: Context,
    store,
    meter: CallMeter,
    thread_id: str,
    closing_fold: bool = True,
    on_turn: Callable[[int], None] | None = None,
) -> SummaryReplay:
    """Run the production SUMMARY_NODES over ``conversation`` (see the module docstring).

    ``context.model`` must name a model whose calls land in ``meter`` (a registered
    ``MeteredChatModel``); ``on_turn(n)`` is called after every replayed message.
    """
    graph = nodes_graph(SUMMARY_NODES, store)
    turns = replay_turns(conversation)
    history: list[BaseMessage] = []
    state: dict[str, Any] = {"summary": {}, "summarized_through": None, "summary_folds": 0}
    folds: list[FoldRecord] = []
    errors: list[str] = []
    node_runs = 0
    first_call = len(meter.records)
    start = time.perf_counter()

    async def run(ctx: Context, closing: bool = False) -> None:
        nonlocal state, node_runs
        mark = len(meter.records)
        t0 = time.perf_counter()
        values = await _run_node(graph, {**state, "messages": list(history)}, ctx, thread_id, errors)
        seconds = time.perf_counter() - t0
        node_runs += 1
        before = state["summary_folds"]
        state = {
            "summary": values.get("summary") or state["summary"],
            "summarized_through": values.get("summarized_through", state["summarized_through"]),
            "summary_folds": values.get("summary_folds", before),
        }
        if state["summary_folds"] > before:
            calls = [c for c in meter.since(mark) if c.kind in FOLD_KINDS]
            folds.append(FoldRecord(len(folds) + 1, len(history), seconds, calls, dict(state["summary"]), closing))

    for i, turn in enumerate(turns):
        history.append(turn.message)
        if not turn.is_human:  # production: the memory phase runs after each reply
            await run(context)
        if on_turn:
            on_turn(i + 1)
    if history and turns[-1].is_human:
        await run(context)
    if closing_fold and history:
        history.append(HumanMessage(CLOSING_MARKER, id=f"{conversation.id}-closing"))
        await run(replace(context, summary_window=1, tail_size=1), closing=True)
        history.pop()
    return SummaryReplay(
        conversation_id=conversation.id,
        variant=context.summary_prompt,
        messages=history,
        folds=folds,
        calls=meter.since(first_call),
        node_runs=node_runs,
        wall_seconds=time.perf_counter() - start,
        errors=errors,
    )
