"""``memory-agent eval chats``: is the chat a user asks for ("go back to the chat about the bank") found?

A set of short chats (``evals/data/chat_finding.json``, the user's lines only) is replayed for one
fresh user through the full production graph (offline model by default, so titles are the
offline keyword titles), one thread per chat, in the eval database; nothing is folded, so this
measures finding chats *before* their first summary. Each paraphrased request then goes the
way the CLI sends it: :func:`memory.chat_search.chat_query` strips the framing ("the chat
about…") and :func:`memory.chat_search.find_chat` ranks the user's chats.

* top-1: the chat meant is ranked first (target ≥ 90 % offline);
* switch after a yes: the decision is *one* clear match and it is the chat meant; *several*
  with it among them is a pick from a list; a wrong *one* is the error that costs most.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field, model_validator
from rich.console import Console
from rich.table import Table

from core.context import Context
from evals.datasets._jsonl import read_json
from evals.eval_database import open_eval_workspace
from evals.run_output import RunClock, default_out_dir, new_run_id, write_results_json
from graph.assembly import compile_graph
from llm.chat_model import model_label, load_chat_model
from memory.chat_search import chat_query, decide, ranked_chats
from memory.user_memory import list_chats

__all__ = ["DEFAULT_SET", "ChatFindingOptions", "ChatFindingResults", "ChatFindingSet", "load_chat_finding_set", "run_chat_finding"]

DEFAULT_SET = Path(__file__).resolve().parent / "data" / "chat_finding.json"
TARGET_TOP1 = 0.90


class EvalChat(BaseModel):
    id: str
    messages: list[str] = Field(min_length=1)


class ChatRequest(BaseModel):
    query: str
    chat: str


class ChatFindingSet(BaseModel):
    description: str = ""
    chats: list[EvalChat] = Field(min_length=2)
    queries: list[ChatRequest] = Field(min_length=1)

    @model_validator(mode="after")
    def _queries_name_chats(self) -> "ChatFindingSet":
        ids = [c.id for c in self.chats]
        if len(set(ids)) != len(ids):
            raise ValueError("chat ids must be unique")
        unknown = sorted({q.chat for q in self.queries} - set(ids))
        if unknown:
            raise ValueError(f"queries name chats the set does not have: {', '.join(unknown)}")
        return self


def load_chat_finding_set(path: Path | None = None) -> ChatFindingSet:
    path = Path(path or DEFAULT_SET)
    if not path.is_file():
        raise FileNotFoundError(f"chat-finding set not found at {path.resolve()}")
    return ChatFindingSet.model_validate(read_json(path))


class RequestResult(BaseModel):
    query: str
    searched: str
    expected: str
    ranked: list[str] = Field(description="Chat ids, best first (at most five).")
    scores: list[float]
    outcome: str = Field(description="one, several or none: what the CLI would do.")
    offered: list[str] = Field(description="The chats the CLI would offer (one to confirm, or several to pick from).")

    @property
    def top1(self) -> bool:
        return bool(self.ranked) and self.ranked[0] == self.expected


class ChatFindingResults(BaseModel):
    command: str = "chats"
    dataset: str
    model: str
    chats: int
    titles: dict[str, str]
    top1: float
    switch_after_yes: float = Field(description="Share of requests answered by one clear match, the right one.")
    pick_from_list: float = Field(description="Share answered by several candidates that include the right one.")
    wrong_single: float = Field(description="Share answered by one clear match that is the wrong chat.")
    not_found: float
    requests: list[RequestResult]
    started_at: str
    wall_seconds: float


@dataclass
class ChatFindingOptions:
    dataset: Path | None = None
    model: str = "offline"
    out: Path | None = None
    database_url: str | None = None
    limit: int | None = None


async def run_chat_finding(opts: ChatFindingOptions, console: Console) -> ChatFindingResults:
    data = load_chat_finding_set(opts.dataset)
    chats = data.chats[: opts.limit] if opts.limit else data.chats
    kept = {c.id for c in chats}
    queries = [q for q in data.queries if q.chat in kept]
    run_id, clock = new_run_id(), RunClock()
    results: list[RequestResult] = []
    async with open_eval_workspace(run_id, opts.database_url) as workspace:
        store = workspace.store
        user = workspace.user("chats")
        graph = compile_graph(workspace.backend.checkpointer, store)
        ctx = Context(user_id=user, model=opts.model)
        by_thread: dict[str, str] = {}
        console.print(f"Replaying {len(chats)} chats ({sum(len(c.messages) for c in chats)} turns) through the graph …")
        for chat in chats:
            thread = workspace.thread(chat.id)
            by_thread[thread] = chat.id
            for text in chat.messages:
                await graph.ainvoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=ctx)
        titles = {by_thread[c.thread_id]: c.title for c in await list_chats(store, user) if c.thread_id in by_thread}
        for q in queries:
            searched = chat_query(q.query)
            ranked = await ranked_chats(store, user, searched)
            decision = decide(ranked)
            results.append(
                RequestResult(
                    query=q.query,
                    searched=searched,
                    expected=q.chat,
                    ranked=[by_thread.get(r.chat.thread_id, r.chat.thread_id) for r in ranked[:5]],
                    scores=[r.score for r in ranked[:5]],
                    outcome=decision.outcome,
                    offered=[by_thread.get(r.chat.thread_id, r.chat.thread_id) for r in decision.candidates[: 1 if decision.outcome == "one" else None]],
                )
            )
    n = max(1, len(results))
    out = ChatFindingResults(
        dataset=str(Path(opts.dataset or DEFAULT_SET)),
        model=model_label(load_chat_model(opts.model)),
        chats=len(chats),
        titles=titles,
        top1=sum(r.top1 for r in results) / n,
        switch_after_yes=sum(r.outcome == "one" and r.offered == [r.expected] for r in results) / n,
        pick_from_list=sum(r.outcome == "several" and r.expected in r.offered for r in results) / n,
        wrong_single=sum(r.outcome == "one" and r.offered != [r.expected] for r in results) / n,
        not_found=sum(r.expected not in r.offered for r in results if r.outcome != "one") / n,
        requests=results,
        **clock.timing(),
    )
    out_dir = write_results_json(out, opts.out or default_out_dir("chats", run_id))
    _print(out, console, out_dir)
    return out


def _print(results: ChatFindingResults, console: Console, out_dir: Path) -> None:
    table = Table(title=f"Finding {len(results.requests)} chats among {results.chats} ({results.model})")
    for col in ("measure", "share"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    table.add_row("top-1: the chat meant ranks first", f"{results.top1:.0%}", style="bold")
    table.add_row("one clear match, the right one (switch after a yes)", f"{results.switch_after_yes:.0%}")
    table.add_row("several offered, the right one among them (pick)", f"{results.pick_from_list:.0%}")
    table.add_row("one clear match, the wrong one", f"{results.wrong_single:.0%}")
    table.add_row("not offered at all", f"{results.not_found:.0%}")
    console.print(table)
    console.print(f"Target: top-1 ≥ {TARGET_TOP1:.0%} ({'met' if results.top1 >= TARGET_TOP1 else 'MISSED'}).")
    for r in results.requests:
        if not r.top1:
            console.print(f"  miss {r.query!r} (searched {r.searched!r}): wanted {r.expected}, ranked {r.ranked[:3]}", markup=False)
    console.print(f"Results: {out_dir / 'results.json'}")
