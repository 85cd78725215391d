"""``memory-agent eval recall``: does what was said reach the reply prompt? Judge-free, end to end.

Each LoCoMo conversation is imported by the product's own import path
(``memory.chat_import``: both speakers, speaker A as the user, with their session times; the
memory nodes run after every exchange as in a chat). Then each question of categories 1-4 is
asked as the user, one day after the last session: the production ``load_context`` and
``retrieve`` nodes run on the imported chat's state plus the question, and the reply prompt is
built by ``nodes.reply.reply_prompt``, the function the reply node uses. Nothing is answered
unless ``--reader-model`` is given.

Measured per question, over the prompt without the question itself:

* answer words present: ``evals.metrics.prompt_recall.answer_recall`` against the gold answer
  (corrected by ``locomo_audit_errors.json`` where it has an entry; ``evals.datasets.locomo``);
* evidence turns present: the share of the question's evidence turns (LoCoMo ``dia_id``) whose
  text, or more than half of whose content words, reached the prompt;
* prompt tokens (``core.tokens``, the whole prompt sent) and load_context's wall time.

Baselines in the same run, each a prompt of at most the memory-agent's median prompt tokens
(question included) except the whole history: ``whole_history`` (every turn), ``recent`` (the
newest turns that fit), ``bm25_turns`` (BM25 over the raw turns, best first, while they fit).
A baseline turn is shown as ``[8 May 2023] Caroline: text``. And ``bm25_excerpts``: the
memory-agent's own prompt (system, summary, recent conversation, the same total budget) with
the memory found for the message replaced by plain BM25 turns packed as excerpts, so the
difference is what recall (search, gate, neighbours, facts) adds beyond plain search.

``--conversations`` picks conversations (by index or id); ``--split`` names the part settings
were chosen on: every table is then given for that part and for the rest (held out), with a
paired bootstrap of memory-agent against each baseline (questions resampled).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import time
import uuid
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

from core.context import SAFETY_CEILINGS, Context
from core.messages import stamp_sent_at
from core.state import State
from core.tokens import count_message_tokens
from evals.datasets._jsonl import read_json
from evals.datasets.locomo import load_locomo
from evals.datasets.paths import resolve_data_file
from evals.datasets.schema import CATEGORY_NAMES, Conversation, Probe
from evals.eval_database import open_eval_workspace
from evals.metrics.prompt_recall import BM25, PromptText, answer_recall, evidence_recall
from evals.production_nodes import single_node_graph
from evals.recall_reader import READER_SYSTEMS, ReaderCheck, paired_lead, run_reader_check
from evals.recall_baselines import TurnIndex, baseline_prompts, bm25_excerpts_prompt, turn_line  # noqa: F401 (the eval's names)
from evals.retrieval_eval import load_retrieval_set
from evals.run_output import RunClock, default_out_dir, new_run_id
from evals.terminal import progress_tracker
from graph.assembly import compile_graph
from memory.chat_import import ChatImport, locomo_chat
from memory.import_job import import_chat
from memory.user_memory import chat_titles
from nodes.compaction import model_view
from nodes.reply import reply_prompt
from prompts.reply_prompt import BuiltPrompt, user_words

log = logging.getLogger(__name__)

__all__ = ["RecallOptions", "RecallResults", "SYSTEMS", "run_recall", "baseline_prompts", "percentile"]

CATEGORIES = (1, 2, 3, 4)
SYSTEMS = ("memory-agent", "bm25_excerpts", "whole_history", "recent", "bm25_turns")
QUESTION_DELAY = timedelta(days=1)


@dataclass
class RecallOptions:
    dataset: str | None = None  # a LoCoMo-format file; default <evaldata>/locomo7.json
    limit: int | None = None
    out: Path | None = None
    database_url: str | None = None
    progress: bool = True
    model: str = "offline"  # the chat's model during the import (summaries, extraction)
    reader_model: str | None = None
    judge_model: str | None = None
    reader_questions: int = 100  # the reader check's fixed sample (0: every question)
    reader_systems: tuple[str, ...] = READER_SYSTEMS
    concurrency: int = 1  # reader calls at once: 1 keeps a local server's prompt cache useful
    conversations_at_once: int = 1  # >1 speeds a long run up; load_context times then include the contention
    conversations: list[str] | None = None  # indices (0-based) or ids of the dataset's conversations; None: all
    split: list[str] | None = None  # indices or ids of the conversations settings were chosen on (the rest: held out)
    prompt_token_budget: int | None = None  # the questions' whole-prompt budget (None: Context's default)


# --------------------------------------------------------------------------- results
class CategoryScores(BaseModel):
    questions: int = 0
    answer_recall: float = 0.0
    evidence_recall: float | None = None
    evidence_verbatim: float | None = None
    f1: float | None = None
    judge: float | None = None


class SystemScores(CategoryScores):
    prompt_tokens_median: float = 0.0
    prompt_tokens_p95: float = 0.0
    # Median tokens of each section of the reply prompt (memory-agent only): where the prompt goes.
    prompt_sections_median: dict[str, float] = Field(default_factory=dict)
    per_category: dict[str, CategoryScores] = Field(default_factory=dict)


class RecallResults(BaseModel):
    command: str = "recall"
    dataset: str
    conversations: list[str]
    model: str
    reader_model: str | None = None
    judge_model: str | None = None
    baseline_token_budget: int
    prompt_token_budget: int  # memory-agent's whole-prompt budget for the questions (Context.prompt_token_budget)
    excerpt_token_budget: int  # the most its excerpts could take of it (Context.episodic_token_budget)
    systems: dict[str, SystemScores]
    # The split: the conversations settings were chosen on ("tuning") and the rest ("held_out"),
    # each part's tables, and memory-agent's paired lead over each baseline there.
    split: dict[str, list[str]] = Field(default_factory=dict)
    systems_by_split: dict[str, dict[str, SystemScores]] = Field(default_factory=dict)
    lead: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    per_conversation: dict[str, dict[str, float]] = Field(default_factory=dict)
    load_context_ms: dict[str, float]
    # --reader-model: answers to a fixed sample of questions from some systems' prompts, token F1.
    reader: ReaderCheck | None = None
    # The retrieval eval's unrelated messages, asked as each conversation's user: how many got excerpts.
    unrelated: dict[str, float] = Field(default_factory=dict)
    import_stats: dict[str, float]
    started_at: str
    wall_seconds: float
    notes: list[str] = Field(default_factory=list)


@dataclass
class Asked:
    """One question's prompt under one system."""

    probe: Probe
    conversation: str
    messages: list[BaseMessage]
    tokens: int
    answer_recall: float
    evidence_recall: float | None
    evidence_verbatim: float | None = None
    f1: float | None = None
    judge: float | None = None
    answer: str | None = None  # the reader's, when it read this prompt
    sections: dict[str, int] = field(default_factory=dict)  # the reply prompt's section tokens (memory-agent only)


@dataclass
class Imported:
    conversation: Conversation
    chat: ChatImport
    evidence: dict[str, str]  # dia_id -> the turn's text
    question_time: datetime
    asked: list[Asked] = field(default_factory=list)
    bm25_excerpts: list[Asked] = field(default_factory=list)
    unrelated_asked: int = 0
    unrelated_with_excerpts: int = 0


def question_context(ctx: Context, prompt_token_budget: int | None) -> Context:
    """The Context the questions are asked with: ``prompt_token_budget`` for the whole prompt, the
    excerpts allowed all of it that the other sections leave (their cap raised to the budget, within
    the server's ceiling), so a run shows what recall gives at another budget. The import keeps the
    defaults: the same imported memory is asked at every budget."""
    if prompt_token_budget is None:
        return ctx
    excerpts = min(max(ctx.episodic_token_budget, prompt_token_budget), SAFETY_CEILINGS["episodic_token_budget"])
    return replace(ctx, prompt_token_budget=prompt_token_budget, episodic_token_budget=excerpts)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return float(ordered[rank - 1])


def _context_text(messages: list[BaseMessage]) -> PromptText:
    """Everything the model sees but the question's own words (what was found for the question
    opens the current message: it counts)."""
    *before, current = messages
    found = current.text[: len(current.text) - len(user_words(current))]
    return PromptText("\n".join([*(m.text for m in before), found]))


def score(probe: Probe, conversation: str, messages: list[BaseMessage], evidence: dict[str, str]) -> Asked:
    text = _context_text(messages)
    texts = [evidence[e] for e in probe.evidence if e in evidence]
    return Asked(
        probe=probe,
        conversation=conversation,
        messages=messages,
        tokens=count_message_tokens(messages),
        answer_recall=answer_recall(probe.answer, text),
        evidence_recall=evidence_recall(texts, text),
        evidence_verbatim=evidence_recall(texts, text, verbatim_only=True),
    )


def select_conversations(conversations: list[Conversation], wanted: list[str] | None) -> list[int]:
    """The indices (in the dataset's order) of ``wanted``: 0-based indices or conversation ids; all for None."""
    if not wanted:
        return list(range(len(conversations)))
    ids = {c.id: i for i, c in enumerate(conversations)}
    chosen = set()
    for w in (w.strip() for w in wanted if w.strip()):
        if w in ids:
            chosen.add(ids[w])
        elif w.isdigit() and int(w) < len(conversations):
            chosen.add(int(w))
        else:
            raise ValueError(f"no conversation {w!r}: give indices 0-{len(conversations) - 1} or ids ({', '.join(ids)})")
    return sorted(chosen)


def lead(ours: list[Asked], theirs: list[Asked], seed: int = 0) -> dict[str, float]:
    """memory-agent's paired lead in answer words over a baseline on the same questions (95 % bootstrap)."""
    return paired_lead([a.answer_recall for a in ours], [a.answer_recall for a in theirs], seed)


# --------------------------------------------------------------------------- the run
def _dataset_path(dataset: str | None) -> Path:
    if dataset in (None, "locomo"):
        return resolve_data_file(None, "locomo7.json", "LoCoMo")
    return resolve_data_file(dataset, "locomo7.json", "LoCoMo")


def _evidence_texts(chat: ChatImport, speakers: tuple[str, str]) -> dict[str, str]:
    """dia_id -> the turn as said (without the speaker's name the import puts in front)."""
    out = {}
    for m in chat.messages:
        text = m.text
        for name in speakers:
            if text.startswith(f"{name}: "):
                text = text[len(name) + 2 :]
                break
        if m.source_id:
            out[m.source_id] = text
    return out


async def _ask_memory_agent(graph_lc, graph_rt, values: dict, thread_id: str, ctx: Context, question: HumanMessage) -> tuple[BuiltPrompt, float, State]:
    cfg = {"configurable": {"thread_id": thread_id}}
    state_in = {**values, "messages": [*values.get("messages", []), question]}
    started = time.perf_counter()
    loaded = await graph_lc.ainvoke(state_in, cfg, context=ctx)
    load_ms = (time.perf_counter() - started) * 1000
    if loaded.get("error"):
        raise RuntimeError(f"load_context refused the question: {loaded['error']}")
    retrieved = await graph_rt.ainvoke(loaded, cfg, context=ctx)
    names = {f.name for f in fields(State)}
    state = State(**{k: v for k, v in retrieved.items() if k in names})
    built, _ = reply_prompt(state, ctx)
    return built, load_ms, state


def _summarise(asked: list[Asked]) -> SystemScores:
    def block(items: list[Asked]) -> dict[str, Any]:
        ev = [a.evidence_recall for a in items if a.evidence_recall is not None]
        verbatim = [a.evidence_verbatim for a in items if a.evidence_verbatim is not None]
        f1 = [a.f1 for a in items if a.f1 is not None]
        judged = [a.judge for a in items if a.judge is not None]
        return {
            "questions": len(items),
            "answer_recall": round(statistics.fmean(a.answer_recall for a in items), 4) if items else 0.0,
            "evidence_recall": round(statistics.fmean(ev), 4) if ev else None,
            "evidence_verbatim": round(statistics.fmean(verbatim), 4) if verbatim else None,
            "f1": round(statistics.fmean(f1), 4) if f1 else None,
            "judge": round(statistics.fmean(judged), 4) if judged else None,
        }

    tokens = [a.tokens for a in asked]
    per = {
        f"{c} {CATEGORY_NAMES[c]}": CategoryScores(**block([a for a in asked if a.probe.category == c]))
        for c in CATEGORIES
        if any(a.probe.category == c for a in asked)
    }
    return SystemScores(
        **block(asked),
        prompt_tokens_median=statistics.median(tokens) if tokens else 0.0,
        prompt_tokens_p95=percentile(tokens, 95),
        prompt_sections_median={k: statistics.median(a.sections.get(k, 0) for a in asked) for k in sorted({k for a in asked for k in a.sections})},
        per_category=per,
    )


async def run_recall(opts: RecallOptions, console: Console) -> RecallResults:
    clock = RunClock()
    run_id = new_run_id()
    path = _dataset_path(opts.dataset)
    samples = read_json(path)
    if isinstance(samples, dict):
        samples = [samples]
    conversations = load_locomo(path, limit=opts.limit)
    samples = samples[: len(conversations)]
    chosen = select_conversations(conversations, opts.conversations)
    tuning = {conversations[i].id for i in select_conversations(conversations, opts.split)} if opts.split else set()
    conversations, samples = [conversations[i] for i in chosen], [samples[i] for i in chosen]
    if tuning and not (0 < len(tuning & {c.id for c in conversations}) < len(conversations)):
        # a side with no question was reported as answer words 0.000, as if measured
        side = "tuning" if not tuning & {c.id for c in conversations} else "held-out"
        raise ValueError(
            f"--split leaves no {side} conversation among those run ({', '.join(c.id for c in conversations)}): "
            "name some of them, not all and not none"
        )
    out_dir = opts.out or default_out_dir("recall", run_id)

    unrelated_messages = [q.query for q in load_retrieval_set().queries if not q.related]
    work: list[Imported] = []
    load_ms: list[float] = []
    import_seconds = 0.0
    imported_messages = 0
    async with open_eval_workspace(run_id, opts.database_url) as ws:
        graph = compile_graph(ws.backend.checkpointer, ws.store)
        graph_lc = single_node_graph("load_context", ws.store)
        graph_rt = single_node_graph("retrieve", ws.store)
        chats = [locomo_chat(s) for s in samples]
        questions = sum(1 for c in conversations for p in c.probes if p.category in CATEGORIES)
        with progress_tracker(console, opts.progress) as progress:
            progress.add("import", sum(len(c.messages) for c in chats))
            progress.add("questions", questions)
            limit = asyncio.Semaphore(max(1, opts.conversations_at_once))

            async def one(conv: Conversation, chat: ChatImport) -> Imported:
                nonlocal import_seconds, imported_messages
                async with limit:
                    user = ws.user("recall", conv.id)
                    ctx = Context(user_id=user, model=opts.model)
                    asking = question_context(ctx, opts.prompt_token_budget)
                    started = time.perf_counter()
                    done = await import_chat(
                        graph, ws.backend.pool, user, chat, context=ctx,
                        on_progress=lambda n, total, cid=conv.id: progress.turn("import", cid, n),
                    )
                    import_seconds += time.perf_counter() - started
                    imported_messages += done.messages
                    progress.unit_done("import", conv.id)
                    speakers = (conv.metadata.get("speaker_a") or "", conv.metadata.get("speaker_b") or "")
                    item = Imported(conv, chat, _evidence_texts(chat, speakers), done.last_time + QUESTION_DELAY)
                    values = (await graph.aget_state({"configurable": {"thread_id": done.chat_id}})).values
                    titles = await chat_titles(ws.store, user, [done.chat_id])
                    in_view = {m.id for m in model_view(values.get("messages", []), values.get("summarized_through")) if m.id}
                    turns = TurnIndex.of(done.chat_id, titles.get(done.chat_id, ""), values.get("messages", []), in_view)
                    n = 0
                    for probe in conv.probes:
                        if probe.category not in CATEGORIES:
                            continue
                        question = stamp_sent_at(HumanMessage(probe.question, id=str(uuid.uuid4())), item.question_time)
                        built, ms, state = await _ask_memory_agent(graph_lc, graph_rt, values, done.chat_id, asking, question)
                        load_ms.append(ms)
                        asked = score(probe, conv.id, built.messages, item.evidence)
                        asked.sections = dict(built.section_tokens)
                        item.asked.append(asked)
                        plain = bm25_excerpts_prompt(state, asking, turns, probe.question)
                        item.bm25_excerpts.append(score(probe, conv.id, plain.messages, item.evidence))
                        n += 1
                        progress.turn("questions", conv.id, n)
                    for text in unrelated_messages:
                        message = stamp_sent_at(HumanMessage(text, id=str(uuid.uuid4())), item.question_time)
                        built, _, _ = await _ask_memory_agent(graph_lc, graph_rt, values, done.chat_id, asking, message)
                        item.unrelated_with_excerpts += built.section_tokens.get("episodes", 0) > 0
                        item.unrelated_asked += 1
                    progress.unit_done("questions", conv.id)
                    return item

            # Conversations are independent (a user each): several at once overlap one's database
            # waits with another's embeddings. Each one's exchanges still run in order, as in a chat.
            work = list(await asyncio.gather(*(one(conv, chat) for conv, chat in zip(conversations, chats))))
            progress.finish("import")
            progress.finish("questions")

    ours = [a for w in work for a in w.asked]
    budget = int(statistics.median([a.tokens for a in ours])) if ours else 0
    by_system: dict[str, list[Asked]] = {"memory-agent": ours, "bm25_excerpts": [a for w in work for a in w.bm25_excerpts], "whole_history": [], "recent": [], "bm25_turns": []}
    for w in work:
        bm25 = BM25([m.text for m in w.chat.messages])
        for a in w.asked:
            question = HumanMessage(a.probe.question)
            for name, messages in baseline_prompts(w.chat, question, budget, bm25).items():
                by_system[name].append(score(a.probe, w.conversation.id, messages, w.evidence))
    ids = [w.conversation.id for w in work]
    parts = {"all": ids}
    if tuning:
        parts = {"tuning": [i for i in ids if i in tuning], "held_out": [i for i in ids if i not in tuning]}
    reader = None
    if opts.reader_model:
        sampled_from = parts.get("held_out") or ids  # reported where settings were not chosen
        with progress_tracker(console, opts.progress) as progress:
            n = min(opts.reader_questions or len(ours), len([a for a in ours if a.conversation in sampled_from]))
            progress.add("answers", n * len(opts.reader_systems))
            answered: dict[str, int] = {}

            def on_answer(system: str) -> None:
                # One line per system in a log (the sample takes the 1.5B an hour or more a system).
                answered[system] = answered.get(system, 0) + 1
                progress.turn("answers", system, answered[system])
                if answered[system] == n:
                    progress.unit_done("answers", system, "answers")

            reader = await run_reader_check(
                opts.reader_model, by_system, sampled_from, size=opts.reader_questions, systems=opts.reader_systems,
                judge_spec=opts.judge_model, concurrency=opts.concurrency, on_answer=on_answer,
            )
            progress.finish("answers")
    systems_by_split, leads = {}, {}
    for part, members in parts.items():
        subset = {name: [a for a in items if a.conversation in members] for name, items in by_system.items()}
        if part != "all":
            systems_by_split[part] = {name: _summarise(items) for name, items in subset.items()}
        leads[part] = {name: lead(subset["memory-agent"], subset[name]) for name in subset if name != "memory-agent"}
    per_conversation = {
        c: {name: round(statistics.fmean(a.answer_recall for a in items if a.conversation == c), 4) for name, items in by_system.items() if any(a.conversation == c for a in items)}
        for c in ids
    }

    notes = [
        "Answer words and evidence turns are counted in the prompt without the question itself.",
        f"Baselines (except whole_history) get at most {budget} prompt tokens, the memory-agent's median.",
        "Gold answers and evidence corrected by locomo_audit_errors.json where it has an entry.",
    ]
    if reader is not None:
        notes.append(f"F1 (and judge) are over the reader check's {reader.questions} questions only, for the systems it read from.")
    if opts.conversations_at_once > 1:
        notes.append(f"{opts.conversations_at_once} conversations ran at once: load_context times include that contention (benchmarks/bench_turn gives clean ones).")
    results = RecallResults(
        dataset=str(path),
        conversations=[w.conversation.id for w in work],
        model=opts.model,
        reader_model=opts.reader_model,
        judge_model=opts.judge_model,
        baseline_token_budget=budget,
        prompt_token_budget=(asked_with := question_context(Context(), opts.prompt_token_budget)).prompt_token_budget,
        excerpt_token_budget=asked_with.episodic_token_budget,
        systems={name: _summarise(items) for name, items in by_system.items()},
        split=parts,
        systems_by_split=systems_by_split,
        lead=leads,
        per_conversation=per_conversation,
        unrelated={
            "asked": (asked := sum(w.unrelated_asked for w in work)),
            "with_excerpts": (hit := sum(w.unrelated_with_excerpts for w in work)),
            "rate": round(hit / asked, 4) if asked else 0.0,
        },
        reader=reader,
        load_context_ms={"p50": round(percentile(load_ms, 50), 1), "p95": round(percentile(load_ms, 95), 1)},
        import_stats={
            "messages": imported_messages,
            "seconds": round(import_seconds, 1),
            "ms_per_message": round(1000 * import_seconds / imported_messages, 1) if imported_messages else 0.0,
        },
        started_at=clock.started_at,
        wall_seconds=round(clock.seconds(), 1),
        notes=notes,
    )
    write_outputs(results, out_dir, by_system)
    console.print(results_table(results))
    console.print(f"Unrelated messages given excerpts: {results.unrelated['with_excerpts']:.0f} of {results.unrelated['asked']:.0f}.")
    console.print(f"Written to {out_dir}")
    return results


# --------------------------------------------------------------------------- output
def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def results_table(results: RecallResults) -> Table:
    table = Table(title=f"eval recall on {Path(results.dataset).name} ({len(results.conversations)} conversations)")
    for col in ("system", "answer words", "evidence turns", "tokens median", "tokens p95", "F1", "judge"):
        table.add_column(col)
    for name, s in results.systems.items():
        table.add_row(name, _fmt(s.answer_recall), _fmt(s.evidence_recall), f"{s.prompt_tokens_median:.0f}", f"{s.prompt_tokens_p95:.0f}", _fmt(s.f1), _fmt(s.judge))
    return table


def report_markdown(results: RecallResults) -> str:
    lines = [
        f"# eval recall: {Path(results.dataset).name}, {len(results.conversations)} conversations",
        "",
        f"Import model {results.model}; memory-agent's prompt budget {results.prompt_token_budget} tokens; load_context p50 {results.load_context_ms['p50']} ms, p95 {results.load_context_ms['p95']} ms; "
        f"import {results.import_stats['messages']:.0f} messages in {results.import_stats['seconds']} s "
        f"({results.import_stats['ms_per_message']} ms per message); run {results.wall_seconds} s.",
        "",
        f"Unrelated messages (the retrieval eval's, asked as each conversation's user) given excerpts: "
        f"{results.unrelated.get('with_excerpts', 0):.0f} of {results.unrelated.get('asked', 0):.0f} ({100 * results.unrelated.get('rate', 0.0):.1f} %; target at most 5 %).",
        "",
        "| system | questions | answer words present | evidence turns present | evidence turns verbatim | prompt tokens median | p95 | F1 | judge |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in results.systems.items():
        lines.append(
            f"| {name} | {s.questions} | {_fmt(s.answer_recall)} | {_fmt(s.evidence_recall)} | {_fmt(s.evidence_verbatim)} | {s.prompt_tokens_median:.0f} | {s.prompt_tokens_p95:.0f} | {_fmt(s.f1)} | {_fmt(s.judge)} |"
        )
    ours = results.systems.get("memory-agent")
    if ours and ours.prompt_sections_median:
        lines += ["", "memory-agent's prompt by section (median tokens): " + ", ".join(f"{k} {v:.0f}" for k, v in ours.prompt_sections_median.items()) + "."]
    for part, systems in results.systems_by_split.items():
        lines += ["", f"## {part.replace('_', ' ')}: {', '.join(results.split.get(part, []))}", "",
                  "| system | questions | answer words | evidence turns | tokens median | multi-hop | temporal | open-domain | single-hop |", "|---|---|---|---|---|---|---|---|---|"]
        for name, s in systems.items():
            cats = [_fmt(s.per_category[c].answer_recall) if c in s.per_category else "–" for c in (f"{k} {CATEGORY_NAMES[k]}" for k in CATEGORIES)]
            lines.append(f"| {name} | {s.questions} | {_fmt(s.answer_recall)} | {_fmt(s.evidence_recall)} | {s.prompt_tokens_median:.0f} | " + " | ".join(cats) + " |")
    if results.lead:
        lines += ["", "## memory-agent's lead in answer words (paired bootstrap over questions, 95 %)", ""]
        for part, leads in results.lead.items():
            cells = [f"{name} {v['diff']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]" for name, v in leads.items() if v]
            lines.append(f"- {part.replace('_', ' ')}: " + "; ".join(cells))
    if results.reader is not None:
        lines += reader_markdown(results.reader)
    if results.per_conversation:
        names = list(results.systems)
        lines += ["", "## Answer words per conversation", "", "| conversation | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for conv, scores in results.per_conversation.items():
            lines.append(f"| {conv} | " + " | ".join(_fmt(scores.get(n)) for n in names) + " |")
    lines += ["", "## Per category (answer words / evidence turns)", ""]
    cats = sorted({c for s in results.systems.values() for c in s.per_category})
    lines.append("| system | " + " | ".join(cats) + " |")
    lines.append("|---" * (len(cats) + 1) + "|")
    for name, s in results.systems.items():
        cells = [f"{_fmt(s.per_category[c].answer_recall)} / {_fmt(s.per_category[c].evidence_recall)} (n={s.per_category[c].questions})" if c in s.per_category else "–" for c in cats]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", *[f"- {n}" for n in results.notes], ""]
    return "\n".join(lines)


def reader_markdown(check: ReaderCheck) -> list[str]:
    lines = [
        "", f"## Reader check: {check.reader_model} answers {check.questions} questions ({', '.join(check.conversations)})", "",
        "The same questions for every system, evenly spaced over these conversations; LoCoMo token F1 of the answer, "
        "and the sample's answer words in the prompt beside it.", "",
        "| system | F1 | answer words in the prompt | evidence turns | refusals | judge |", "|---|---|---|---|---|---|",
    ]
    for name, r in check.systems.items():
        lines.append(f"| {name} | {_fmt(r.f1)} | {_fmt(r.answer_recall)} | {_fmt(r.evidence_recall)} | {r.refusals} | {_fmt(r.judge)} |")
    for name, v in check.lead_f1.items():
        words = check.lead_answer_words.get(name, {})
        if v:
            lines.append(f"- memory-agent against {name}: F1 {v['diff']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]"
                         + (f"; answer words in the prompt {words['diff']:+.3f} [{words['low']:+.3f}, {words['high']:+.3f}]" if words else ""))
    lines.append(f"- {check.seconds:.0f} s of answering.")
    if check.examples:
        lines += ["", "The first answers:", ""]
        for ex in check.examples:
            answers = "; ".join(f"{name}: “{ex[name]}”" for name in check.systems if name in ex)
            lines.append(f"- {ex['question']} (gold: {ex['gold']}) {answers}")
    return lines


def question_rows(by_system: dict[str, list[Asked]]) -> list[dict[str, Any]]:
    """One row per question: every system's scores side by side, and what memory found for it
    (the current message without the question), so a miss can be read, not guessed."""
    rows = []
    for i, ours in enumerate(by_system["memory-agent"]):
        rows.append({
            "conversation": ours.conversation,
            "category": ours.probe.category,
            "question": ours.probe.question,
            "answer": str(ours.probe.answer),
            "evidence": list(ours.probe.evidence),
            "systems": {
                name: {k: v for k, v in (("answer_recall", a.answer_recall), ("evidence_recall", a.evidence_recall), ("tokens", a.tokens),
                                         ("f1", a.f1), ("reader_answer", a.answer)) if v is not None}
                for name, items in by_system.items() if i < len(items) and (a := items[i])
            },
            "found": _context_text(ours.messages[-1:]).text,
        })
    return rows


def write_outputs(results: RecallResults, out_dir: Path, by_system: dict[str, list[Asked]] | None = None) -> None:
    from evals.charts import recall_vs_tokens

    out_dir.mkdir(parents=True, exist_ok=True)
    if by_system:
        with (out_dir / "questions.jsonl").open("w", encoding="utf-8") as f:
            for row in question_rows(by_system):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (out_dir / "results.json").write_text(results.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "report.md").write_text(report_markdown(results), encoding="utf-8")
    recall_vs_tokens({name: (s.prompt_tokens_median, s.answer_recall, s.evidence_recall) for name, s in results.systems.items()}, out_dir / "recall_vs_tokens.png")
