"""``memory-agent eval tokens``: how many prompt tokens the graph sends per turn vs the full history.

Each conversation is replayed through the FULL production graph
(``compile_graph`` with the Postgres checkpointer and store of the eval
database; the offline model by default), one user message per turn, on one
thread per conversation and a fresh user per conversation. After every turn:

* sent: ``state.turn_usage["prompt_tokens_estimated"]``, the token count of the
  prompt the reply node built (system + user context + summary + knowledge +
  recent messages + current message), plus ``input_tokens``, what the model
  itself reported (the offline model estimates ~4 chars a token too);
* full: ``core.tokens.count_message_tokens`` of the same system text
  (persona + reply rules) followed by every message of the thread so far, up
  to this turn's user message: what a no-memory agent would send.

Two-speaker conversations (LoCoMo): the human speaker's turns (speaker A) are
the user messages and the graph writes its own replies; speaker B's turns are
NOT fed (they would be the replies, and the graph makes its own). Each
session's first user message starts with its ``[session N, date]`` header.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage
from rich.console import Console
from rich.table import Table

from evals.options import CompactionOverrides, compaction_settings
from evals.token_results import ANCHOR, ConversationTokens, TokenResults, TurnTokens, headline
from evals.token_report import write_token_files
from evals.conversation_replay import human_speaker, session_header
from evals.datasets import load_dataset
from evals.datasets.schema import Conversation
from evals.eval_database import open_eval_workspace
from evals.run_output import RunClock, default_out_dir, new_run_id
from evals.terminal import progress_tracker
from graph.assembly import compile_graph
from core.context import Context
from core.messages import last_human_index
from prompts.reply_prompt import system_text
from core.tokens import count_message_tokens
from llm.chat_model import load_chat_model, model_label, resolve_model_name
from memory.user_memory import list_facts, stored_tasks
from nodes.reply import persona_text

__all__ = ["ANCHOR", "TokenOptions", "TokenResults", "run_token_savings", "user_messages"]

@dataclass
class TokenOptions:
    dataset: str = "builtin"
    limit: int | None = None
    max_turns: int | None = None
    model: str = "offline"
    out: Path | None = None
    compaction: CompactionOverrides = field(default_factory=CompactionOverrides)
    database_url: str | None = None
    progress: bool = True


def user_messages(conversation: Conversation) -> list[str]:
    """The human speaker's turns as user messages; each session's first one carries its header."""
    who = human_speaker(conversation)
    out: list[str] = []
    for session in conversation.sessions:
        first = True
        for turn in session.turns:
            if turn.speaker != who or not turn.text.strip():
                continue
            out.append(f"{session_header(session)} {turn.text}" if first and session.date else turn.text)
            first = False
    return out


async def _replay(graph, conversation: Conversation, ctx: Context, thread_id: str, texts: list[str], tick) -> tuple[list[TurnTokens], int]:
    config = {"configurable": {"thread_id": thread_id}}
    system = SystemMessage(system_text(persona_text(ctx)))
    turns: list[TurnTokens] = []
    state: dict = {}
    for i, text in enumerate(texts, 1):
        summarized = bool(state.get("summary"))
        state = await graph.ainvoke({"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, config, context=ctx)
        messages = state.get("messages") or []
        usage = state.get("turn_usage") or {}
        cut = last_human_index(messages)
        history = messages[: cut + 1] if cut is not None else messages
        turns.append(
            TurnTokens(
                conversation=conversation.id,
                turn=i,
                sent=int(usage.get("prompt_tokens_estimated") or 0),
                model_input=int(usage.get("input_tokens") or 0),
                full=count_message_tokens([system, *history]),
                summarized=summarized,
                refused=state.get("error"),
            )
        )
        tick(i)
    return turns, int(state.get("summary_folds") or 0)


def _summary(conversation: str, turns: list[TurnTokens], folds: int) -> ConversationTokens:
    sent = sum(t.sent for t in turns)
    full = sum(t.full for t in turns)
    return ConversationTokens(
        conversation=conversation,
        turns=len(turns),
        sent_total=sent,
        model_input_total=sum(t.model_input for t in turns),
        full_total=full,
        saved=1 - sent / full if full else 0.0,
        last_sent=turns[-1].sent if turns else 0,
        last_full=turns[-1].full if turns else 0,
        folds=folds,
    )


async def run_token_savings(opts: TokenOptions, console: Console) -> TokenResults:
    conversations = load_dataset(opts.dataset, limit=opts.limit)
    if not conversations:
        raise ValueError(f"dataset {opts.dataset!r} has no conversations")
    model = resolve_model_name(opts.model)
    run_id = new_run_id()
    out_dir = opts.out or default_out_dir("tokens", run_id)
    clock = RunClock()
    plans = [(c, user_messages(c)[: opts.max_turns] if opts.max_turns else user_messages(c)) for c in conversations]
    all_turns: list[TurnTokens] = []
    per_conversation: list[ConversationTokens] = []
    async with open_eval_workspace(run_id, opts.database_url) as workspace:
        graph = compile_graph(workspace.backend.checkpointer, workspace.store)
        with progress_tracker(console, opts.progress) as tracker:
            tracker.add("tokens", sum(len(t) for _, t in plans))
            for conversation, texts in plans:
                ctx = opts.compaction.context(workspace.user("tokens", conversation.id), model=model)
                thread = workspace.thread("tokens", conversation.id)
                turns, folds = await _replay(
                    graph, conversation, ctx, thread, texts, lambda n, cid=conversation.id: tracker.turn("tokens", cid, n)
                )
                tracker.unit_done("tokens", conversation.id)
                all_turns += turns
                summary = _summary(conversation.id, turns, folds)
                facts = await list_facts(workspace.store, ctx.user_id, include_superseded=True)
                summary.facts_active = sum(1 for f in facts if f.status == "active")
                summary.facts_superseded = len(facts) - summary.facts_active
                summary.tasks = len(await stored_tasks(workspace.store, ctx.user_id))
                per_conversation.append(summary)
            tracker.finish("tokens")
    sent = sum(c.sent_total for c in per_conversation)
    full = sum(c.full_total for c in per_conversation)
    results = TokenResults(
        dataset=opts.dataset,
        model=model_label(load_chat_model(model)),
        settings={
            **compaction_settings(opts.compaction.context("local")),
            "max_turns": opts.max_turns,
        },
        conversations=per_conversation,
        turns=all_turns,
        sent_total=sent,
        full_total=full,
        saved=1 - sent / full if full else 0.0,
        mean_sent=sent / len(all_turns) if all_turns else 0.0,
        mean_full=full / len(all_turns) if all_turns else 0.0,
        notes=_notes(conversations, opts),
        started_at=clock.started_at,
        wall_seconds=clock.seconds(),
    )
    paths = write_token_files(results, out_dir)
    console.print(_table(results))
    console.print(f"[bold]{headline(results)}[/]")
    console.print(f"[dim]{ANCHOR}[/]")
    console.print(f"Wrote {paths['report']}, results.json, results.csv and charts in {out_dir}")
    return results


def _notes(conversations: list[Conversation], opts: TokenOptions) -> list[str]:
    notes = [
        "Token counts are approximations (~4 characters a token, LangChain's count_tokens_approximately), the same "
        "counter the graph budgets with, so the two columns are comparable; real tokenizer counts differ.",
        "The baseline is the persona system text plus every message of the thread so far; the graph's prompt "
        "adds user context, the summary and knowledge but keeps only the recent messages.",
    ]
    if any(len(c.speakers) > 1 and "user" not in c.speakers for c in conversations):
        notes.append(
            "Two-speaker conversations: only the first speaker's turns were sent as user messages; the other "
            "speaker's turns were not fed (the graph wrote its own replies), so the full history here is smaller "
            "than the dataset's whole conversation."
        )
    if opts.max_turns:
        notes.append(f"Only the first {opts.max_turns} user turns of each conversation were replayed.")
    return notes


def _table(results: TokenResults) -> Table:
    table = Table(title=f"Prompt tokens per conversation ({results.dataset}, model {results.model})")
    for col in ("conversation", "turns", "folds", "sent", "full history", "saved", "last turn sent / full"):
        table.add_column(col, justify="right" if col != "conversation" else "left")
    for c in results.conversations:
        table.add_row(
            c.conversation, str(c.turns), str(c.folds), f"{c.sent_total:,}", f"{c.full_total:,}", f"{c.saved:.1%}", f"{c.last_sent:,} / {c.last_full:,}"
        )
    table.add_row("total", str(len(results.turns)), "", f"{results.sent_total:,}", f"{results.full_total:,}", f"{results.saved:.1%}", "", style="bold")
    return table
