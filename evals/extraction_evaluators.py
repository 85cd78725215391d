"""Evaluators of the extraction eval: plain ``(outputs, reference_outputs) -> [{"key", "score"}]`` functions.

Precision, recall and F1 pool every replayed speaker of a conversation: all
memories extracted for its speakers against all of their gold facts that were
stated in the replayed turns (``--max-turns`` cuts both).
"""

from __future__ import annotations

from collections.abc import Callable

from evals.experiment import Score, record_evaluator
from evals.extraction_records import ExtractionOutput, ExtractionReference
from evals.fact_matching import count_duplicates, match_facts, with_subject
from evals.pricing import estimate_cost

__all__ = ["extraction_cost", "make_fact_match_evaluator"]

_evaluator = record_evaluator(ExtractionOutput, ExtractionReference)


def make_fact_match_evaluator(embed: Callable[[list[str]], list[list[float]]], threshold: float, duplicate_threshold: float):
    """An evaluator scoring memories against gold facts with ``embed`` (MiniLM's ``embed_documents``)."""

    @_evaluator
    def fact_match(out: ExtractionOutput, ref: ExtractionReference) -> list[Score]:
        extracted = matched = gold_total = duplicates = 0
        for s in out.speakers:
            replayed = set(s.replayed_turn_ids)
            gold = [g.text for g in ref.gold.get(s.speaker, []) if g.turn_id is None or g.turn_id in replayed]
            subject = ref.subjects.get(s.speaker)
            memories = [with_subject(m, subject) for m in s.memories]
            vectors = embed(memories) if memories else []
            match = match_facts(vectors, embed(gold) if gold else [], threshold)
            extracted += match.extracted
            matched += match.matched
            gold_total += match.gold
            duplicates += count_duplicates(vectors, duplicate_threshold)
        scores: list[Score] = [
            {"key": "facts_extracted", "score": extracted},
            {"key": "gold_facts", "score": gold_total},
            {"key": "duplicates", "score": duplicates},
        ]
        precision = matched / extracted if extracted else None
        recall = matched / gold_total if gold_total else None
        if precision is not None:
            scores.append({"key": "fact_precision", "score": precision})
        if recall is not None:
            scores.append({"key": "fact_recall", "score": recall})
            p = precision or 0.0
            scores.append({"key": "fact_f1", "score": 2 * p * recall / (p + recall) if p + recall else 0.0})
        return scores

    return fact_match


@_evaluator
def extraction_cost(out: ExtractionOutput, ref: ExtractionReference) -> list[Score]:
    writer = {k: sum(s.writer.get(k, 0) for s in out.speakers) for k in ("facts_merged", "duplicates_dropped")}
    scores: list[Score] = [
        {"key": "extract_calls", "score": out.calls},
        {"key": "extract_input_tokens", "score": out.input_tokens},
        {"key": "extract_output_tokens", "score": out.output_tokens},
        {"key": "extraction_failures", "score": sum(len(s.failures) for s in out.speakers)},
        {"key": "writer_merged", "score": writer["facts_merged"]},
        {"key": "writer_dropped", "score": writer["duplicates_dropped"]},
    ]
    cost = estimate_cost(out.model, out.input_tokens, out.output_tokens)
    if cost is not None and out.usage_reported:
        scores.append({"key": "extract_cost_usd", "score": cost})
    return scores
