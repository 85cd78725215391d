"""Evaluators of the summaries eval: plain functions ``(outputs, reference_outputs) -> [{"key", "score"}]``.

That is LangSmith's evaluator signature, so the same functions score a run
uploaded to LangSmith and an offline run. ``outputs`` is a ``SummaryOutput``
dict, ``reference_outputs`` a ``SummaryReference`` dict. A metric that does not
apply (no reference summary, a single fold, no reader) is left out, never
reported as 0.

Per-conversation means are returned; the harness averages conversations
(each conversation weighs the same, which is also the bootstrap's unit).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Awaitable, Callable
from statistics import mean

from evals.experiment import Score, record_evaluator
from evals.metrics import content_tokens, count_tokens, lexical_recall, rouge_scores, score_qa
from evals.pricing import estimate_cost
from evals.summary_reader import judge_all
from evals.summary_records import ProbeRecord, SummaryOutput, SummaryReference
from core.schemas import SummaryBoard

__all__ = [
    "ADVERSARIAL",
    "SURVIVAL_RECALL",
    "board_items",
    "fold_stability",
    "make_judge_evaluator",
    "retention",
    "rouge_agreement",
    "summary_cost",
    "SUMMARY_EVALUATORS",
]

ADVERSARIAL = 5
#: An item of an earlier board "survives" when this share of its content words is in the later board.
SURVIVAL_RECALL = 0.8

_evaluator = record_evaluator(SummaryOutput, SummaryReference)


def _gold_for_recall(probe: ProbeRecord) -> str:
    # As LoCoMo's scorer does for category 3, only the part before ';' is the answer.
    return probe.answer.split(";")[0].strip() if probe.category == 3 else probe.answer


def _means(prefix: str, per_probe: list[tuple[int, float]]) -> list[Score]:
    if not per_probe:
        return []
    by_cat: dict[int, list[float]] = defaultdict(list)
    for cat, value in per_probe:
        by_cat[cat].append(value)
    scores: list[Score] = [{"key": prefix, "score": mean(v for _, v in per_probe)}]
    scores += [{"key": f"{prefix}_cat{c}", "score": mean(vals)} for c, vals in sorted(by_cat.items())]
    return scores


@_evaluator
def retention(out: SummaryOutput, ref: SummaryReference) -> list[Score]:
    """Lexical recall of gold answers in the summary; reader token F1 when answers exist (cat 5 apart)."""
    answerable = [p for p in ref.probes if p.category != ADVERSARIAL]
    lexical = [(p.category, lexical_recall(_gold_for_recall(p), out.summary)) for p in answerable]
    scores = _means("retention_lexical", lexical)
    headline = scores[0]["score"] if scores else None
    if out.answers is not None:
        answers = {a.question_id: a.answer for a in out.answers}
        f1s = [(p.category, score_qa(answers.get(p.question_id, ""), p.answer, p.category)) for p in answerable]
        f1_scores = _means("retention_f1", f1s)
        scores += f1_scores
        if f1_scores:
            headline = f1_scores[0]["score"]
        adversarial = [p for p in ref.probes if p.category == ADVERSARIAL]
        if adversarial:
            refusals = [score_qa(answers.get(p.question_id, ""), p.answer, p.category) for p in adversarial]
            scores.append({"key": "adversarial_refusal", "score": mean(refusals)})
    if headline is not None:
        scores.insert(0, {"key": "retention", "score": headline})
    return scores


@_evaluator
def rouge_agreement(out: SummaryOutput, ref: SummaryReference) -> list[Score]:
    """ROUGE-1/2/L F-measure of the final summary against the reference summaries (best reference)."""
    if not ref.references:
        return []
    rouge = rouge_scores(out.summary, ref.references)
    return [{"key": k, "score": v.fmeasure} for k, v in rouge.items()]


@_evaluator
def summary_cost(out: SummaryOutput, ref: SummaryReference) -> list[Score]:
    """Summary size, compression, calls, tokens, time per fold, estimated cost."""
    summary_tokens = count_tokens(out.summary)
    scores: list[Score] = [
        {"key": "summary_tokens", "score": summary_tokens},
        {"key": "folds", "score": len(out.folds)},
        {"key": "model_calls", "score": sum(out.calls_by_kind.values())},
        {"key": "input_tokens", "score": out.input_tokens},
        {"key": "output_tokens", "score": out.output_tokens},
    ]
    if summary_tokens:
        scores.append({"key": "compression_ratio", "score": out.conversation_tokens / summary_tokens})
    if out.folds:
        # The model calls of a fold are what a prompt changes; the node's store writes (and the embedding
        # cache they hit) are the same for every variant, so they are reported apart.
        scores.append({"key": "seconds_per_fold", "score": mean(f.model_seconds for f in out.folds)})
        scores.append({"key": "node_seconds_per_fold", "score": mean(f.node_seconds for f in out.folds)})
    cost = estimate_cost(out.model, out.input_tokens, out.output_tokens)
    if cost is not None and out.usage_reported:
        scores.append({"key": "cost_usd", "score": cost})
    return scores


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def board_items(board: dict) -> list[str]:
    """The units of information of a board: its key facts and the sentences of its summary."""
    b = SummaryBoard.model_validate(board)
    sentences = [s.strip() for s in _SENTENCE_END.split(b.summary) if s.strip()]
    return [i for i in [*b.key_facts, *sentences] if content_tokens(i)]


def _survival(items: list[str], later_text: str) -> float | None:
    if not items:
        return None
    return mean(1.0 if lexical_recall(i, later_text) >= SURVIVAL_RECALL else 0.0 for i in items)


@_evaluator
def fold_stability(out: SummaryOutput, ref: SummaryReference) -> list[Score]:
    """How much of what earlier folds kept is still there later (needs two folds or more)."""
    if len(out.folds) < 2:
        return []
    folds = out.folds
    rendered = [SummaryBoard.model_validate(f.board).render() for f in folds]
    to_end, to_next = [], []
    for i, fold in enumerate(folds[:-1]):
        items = board_items(fold.board)
        if (s := _survival(items, rendered[-1])) is not None:
            to_end.append(s)
        if (s := _survival(items, rendered[i + 1])) is not None:
            to_next.append(s)
    scores: list[Score] = []
    if to_end:
        scores.append({"key": "stability", "score": mean(to_end)})
    if to_next:
        scores.append({"key": "fold_retention", "score": mean(to_next)})
    return scores


def make_judge_evaluator(
    judge_model, concurrency: int = 8
) -> Callable[[dict | None, dict | None], Awaitable[list[Score]]]:
    """An async evaluator: the judge labels each reader answer (cat 5 apart) CORRECT or WRONG."""

    @_evaluator
    async def llm_judge(out: SummaryOutput, ref: SummaryReference) -> list[Score]:
        if out.answers is None:
            return []
        answers = {a.question_id: a.answer for a in out.answers or []}
        probes = [p for p in ref.probes if p.category != ADVERSARIAL and p.question_id in answers]
        labels = await judge_all(
            judge_model, [(p.question, p.answer, answers[p.question_id]) for p in probes], concurrency
        )
        return _means("judge", [(p.category, v) for p, v in zip(probes, labels)])

    return llm_judge


SUMMARY_EVALUATORS = [retention, rouge_agreement, summary_cost, fold_stability]
