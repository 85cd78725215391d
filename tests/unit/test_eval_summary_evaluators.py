"""The summaries eval's evaluators: retention, ROUGE agreement, cost, stability (plain functions)."""

from __future__ import annotations

import pytest

from evals.summary_evaluators import board_items, fold_stability, retention, rouge_agreement, summary_cost
from evals.summary_records import FoldOutput, ProbeAnswer, ProbeRecord, SummaryOutput, SummaryReference


def output(summary: str, *, answers=None, folds=None, model="offline", tokens=(0, 0), conversation_tokens=1000) -> dict:
    return SummaryOutput(
        conversation_id="c",
        variant="v",
        model=model,
        summary=summary,
        board={"summary": summary},
        folds=folds or [],
        messages=10,
        conversation_tokens=conversation_tokens,
        node_runs=5,
        calls_by_kind={"fold": 2, "title": 1},
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        wall_seconds=1.0,
        answers=answers,
    ).model_dump()


def reference(*probes: tuple[str, str, int], references=()) -> dict:
    return SummaryReference(
        source="test",
        probes=[ProbeRecord(question_id=f"q{i}", question=q, answer=a, category=c) for i, (q, a, c) in enumerate(probes)],
        references=list(references),
    ).model_dump()


def scores(results) -> dict:
    return {r["key"]: r["score"] for r in results}


PROBES = (
    ("Where does Priya live?", "Lisbon", 4),
    ("When did she move?", "14 March 2025", 2),
    ("What is her cat's name?", "Not mentioned in the conversation", 5),
)


def test_without_a_reader_retention_is_lexical_recall_of_answers_in_the_summary():
    s = scores(retention(output("Priya moved to Lisbon in March."), reference(*PROBES)))
    # Lisbon fully present (1.0); "14 March 2025" -> {14, march, 2025}: only march (1/3). Cat 5 is left out.
    assert s["retention_lexical_cat4"] == 1.0
    assert s["retention_lexical_cat2"] == pytest.approx(1 / 3)
    assert s["retention"] == s["retention_lexical"] == pytest.approx((1 + 1 / 3) / 2)
    assert "retention_f1" not in s and "adversarial_refusal" not in s


def test_with_a_reader_retention_is_locomo_token_f1_and_adversarial_is_scored_apart():
    answers = [
        ProbeAnswer(question_id="q0", answer="Lisbon"),
        ProbeAnswer(question_id="q1", answer="No information available"),
        ProbeAnswer(question_id="q2", answer="No information available"),
    ]
    s = scores(retention(output("Priya moved to Lisbon.", answers=answers), reference(*PROBES)))
    assert s["retention_f1_cat4"] == 1.0
    assert s["retention_f1_cat2"] == 0.0
    assert s["retention"] == s["retention_f1"] == 0.5
    assert s["adversarial_refusal"] == 1.0


def test_rouge_is_left_out_without_reference_summaries_and_perfect_on_the_reference_itself():
    assert rouge_agreement(output("anything"), reference(*PROBES)) == []
    s = scores(rouge_agreement(output("Priya moved to Lisbon."), reference(references=["Priya moved to Lisbon."])))
    assert s == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}


def test_cost_reports_compression_and_prices_only_known_models():
    text = "x" * 400  # 100 tokens at ~4 characters a token
    offline = scores(summary_cost(output(text, tokens=(1000, 200)), reference()))
    assert offline["summary_tokens"] == 100
    assert offline["compression_ratio"] == 10.0
    assert offline["model_calls"] == 3
    assert "cost_usd" not in offline
    priced = scores(summary_cost(output(text, model="gpt-4.1-mini", tokens=(1_000_000, 100_000)), reference()))
    assert priced["cost_usd"] == pytest.approx(0.40 + 0.16)


def fold(i: int, facts: list[str]) -> FoldOutput:
    return FoldOutput(index=i, after_message=i * 10, node_seconds=0.1, model_seconds=0.1, calls=1, input_tokens=0, output_tokens=0, board={"key_facts": facts})


def test_stability_counts_earlier_items_still_found_later():
    folds = [
        fold(1, ["Priya lives in Lisbon", "Tom teaches chemistry"]),
        fold(2, ["Priya lives in Lisbon", "Tom teaches chemistry", "Biscuit is a ginger cat"]),
        fold(3, ["Priya lives in Lisbon", "Biscuit is a ginger cat"]),
    ]
    s = scores(fold_stability(output("x", folds=folds), reference()))
    # to the end: fold 1 keeps 1/2, fold 2 keeps 2/3; to the next fold: 2/2 and 2/3
    assert s["stability"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert s["fold_retention"] == pytest.approx((1 + 2 / 3) / 2)


def test_stability_needs_two_folds_and_failed_targets_score_nothing():
    assert fold_stability(output("x", folds=[fold(1, ["a fact"])]), reference()) == []
    for evaluator in (retention, rouge_agreement, summary_cost, fold_stability):
        assert evaluator(None, reference(*PROBES)) == []


def test_board_items_are_key_facts_and_summary_sentences():
    items = board_items({"summary": "Priya is moving. She has a cat!", "key_facts": ["Flight on 14 March"]})
    assert items == ["Flight on 14 March", "Priya is moving.", "She has a cat!"]
