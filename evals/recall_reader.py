"""The reader check of ``eval recall``: does a lead in what reaches the prompt carry into answers?

A reader model answers a fixed sample of the questions from each compared system's prompt (by
default memory-agent's and bm25_turns'), and each answer is scored with LoCoMo's token F1
(``evals.metrics.score_qa``). The sample is the same for every system and every run: evenly
spaced over the held-out conversations' questions in the dataset's order (all conversations
without a split), so it follows their mix of categories and needs no seed.

Each prompt is sent as the system built it, with one line added under the question asking for
a short phrase (LoCoMo's F1 rewards the answer's words, not a sentence around them). The calls
go one system and one conversation at a time, so a local server's prompt cache (llama.cpp keeps
the last prompt) reuses the part a conversation's prompts share: memory-agent's system message,
summary and recent turns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel, Field

from evals.metrics import is_refusal, score_qa

__all__ = ["READER_INSTRUCTION", "READER_SYSTEMS", "ReaderCheck", "paired_lead", "reader_messages", "reader_sample", "run_reader_check"]


class Asked(Protocol):
    """What the reader needs of ``evals.recall_eval.Asked`` (a protocol: that module imports this one)."""

    probe: Any
    conversation: str
    messages: list[BaseMessage]
    answer_recall: float
    evidence_recall: float | None
    f1: float | None
    judge: float | None
    answer: str | None


#: The systems the reader answers from unless told otherwise: the issue's comparison (memory
#: against plain search at the same tokens). The whole history (~26k tokens) would take a local
#: 1.5B about 8 minutes a question.
READER_SYSTEMS = ("memory-agent", "bm25_turns")
# No "if it is not there, say so" escape: every question of categories 1-4 has an answer, and given
# one the local 0.5B and 1.5B took it even when the prompt held the answer (docs/episodic-memory.md).
READER_INSTRUCTION = (
    "Answer the question above from what this conversation shows, with a short phrase "
    "(a few words: a name, a date, a place, a short list), not a full sentence."
)
#: Output cap of an answer: a short phrase is asked for; a small model that loops stops here.
READER_MAX_TOKENS = 64


class ReaderSystem(BaseModel):
    f1: float
    answer_recall: float  # the same sample's answer words in the prompt, for comparison
    evidence_recall: float | None = None
    refusals: int = 0
    judge: float | None = None


class ReaderCheck(BaseModel):
    reader_model: str
    questions: int
    conversations: list[str]
    systems: dict[str, ReaderSystem]
    # memory-agent's paired lead over each other system on the sample (bootstrap over questions, 95 %).
    lead_f1: dict[str, dict[str, float]] = Field(default_factory=dict)
    lead_answer_words: dict[str, dict[str, float]] = Field(default_factory=dict)
    seconds: float = 0.0
    examples: list[dict[str, str]] = Field(default_factory=list)  # the first few answers, to read


def reader_sample(asked: Sequence[Asked], conversations: Sequence[str], size: int) -> list[int]:
    """Indices into ``asked`` (memory-agent's questions, in the dataset's order) of the fixed sample:
    ``size`` evenly spaced among those of ``conversations`` (every one of them for ``size`` 0)."""
    wanted = set(conversations)
    pool = [i for i, a in enumerate(asked) if a.conversation in wanted]
    if size <= 0 or size >= len(pool):
        return pool
    return [pool[(k * len(pool)) // size] for k in range(size)]


def reader_messages(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The prompt as built, with the short-answer line under the question."""
    *before, question = messages
    return [*before, HumanMessage(f"{question.text}\n\n{READER_INSTRUCTION}")]


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def paired_lead(ours: Sequence[float], theirs: Sequence[float], seed: int = 0) -> dict[str, float]:
    """mean(ours) - mean(theirs) on the same questions, with the 95 % percentile bootstrap interval
    (questions resampled, 2,000 times); {} without a pair to compare."""
    from evals.metrics.bootstrap import bootstrap_diff

    if not ours or len(ours) != len(theirs):
        return {}
    b = bootstrap_diff(list(ours), list(theirs), n_resamples=2000, seed=seed)
    return {"diff": round(b.mean_diff, 4), "low": round(b.low, 4), "high": round(b.high, 4)}


async def run_reader_check(
    reader_spec: str,
    by_system: dict[str, list[Asked]],
    conversations: Sequence[str],
    *,
    size: int = 100,
    systems: Sequence[str] = READER_SYSTEMS,
    judge_spec: str | None = None,
    concurrency: int = 1,
    on_answer=None,
) -> ReaderCheck:
    """Answer the sample from each of ``systems``' prompts; sets ``f1`` (and ``judge``) on those Asked."""
    from evals.summary_reader import judge_answer
    from llm.chat_model import load_chat_model, with_output_cap

    unknown = [s for s in systems if s not in by_system]
    if unknown:
        raise ValueError(f"no system {', '.join(unknown)} to read from: choose among {', '.join(by_system)}")
    reader = with_output_cap(load_chat_model(reader_spec), READER_MAX_TOKENS)
    judge = load_chat_model(judge_spec) if judge_spec else None
    chosen = reader_sample(by_system["memory-agent"], conversations, size)
    limit = asyncio.Semaphore(max(1, concurrency))
    started = time.perf_counter()

    async def one(system: str, i: int) -> None:
        a = by_system[system][i]
        async with limit:
            answer = (await reader.ainvoke(reader_messages(a.messages))).text.strip()
            a.f1 = score_qa(answer, a.probe.answer, a.probe.category)
            a.answer = answer
            if judge is not None:
                a.judge = await judge_answer(judge, a.probe.question, a.probe.answer, answer)
        if on_answer is not None:
            on_answer(system)

    # One system, then one conversation, at a time: a local server's cache keeps the shared prefix.
    for system in systems:
        await asyncio.gather(*(one(system, i) for i in chosen))

    summary = {}
    for system in systems:
        items = [by_system[system][i] for i in chosen]
        ev = [a.evidence_recall for a in items if a.evidence_recall is not None]
        judged = [a.judge for a in items if a.judge is not None]
        summary[system] = ReaderSystem(
            f1=_mean([a.f1 for a in items]),
            answer_recall=_mean([a.answer_recall for a in items]),
            evidence_recall=_mean(ev) if ev else None,
            refusals=sum(is_refusal(a.answer) for a in items),
            judge=_mean(judged) if judged else None,
        )
    ours = [by_system["memory-agent"][i] for i in chosen] if "memory-agent" in systems else []
    others = [s for s in systems if s != "memory-agent"]
    return ReaderCheck(
        reader_model=reader_spec,
        questions=len(chosen),
        conversations=list(conversations),
        systems=summary,
        lead_f1={s: paired_lead([a.f1 for a in ours], [by_system[s][i].f1 for i in chosen]) for s in others if ours},
        lead_answer_words={s: paired_lead([a.answer_recall for a in ours], [by_system[s][i].answer_recall for i in chosen]) for s in others if ours},
        seconds=round(time.perf_counter() - started, 1),
        examples=[
            {"question": by_system[systems[0]][i].probe.question, "gold": str(by_system[systems[0]][i].probe.answer),
             **{s: by_system[s][i].answer for s in systems}}
            for i in chosen[:8]
        ],
    )
