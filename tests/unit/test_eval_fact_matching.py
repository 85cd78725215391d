"""Matching extracted memories to gold facts: thresholds, precision/recall, duplicates, subjects."""

from __future__ import annotations

import pytest

from evals.extraction_evaluators import make_fact_match_evaluator
from evals.extraction_records import ExtractionOutput, ExtractionReference, GoldFactRecord, SpeakerOutput
from evals.fact_matching import count_duplicates, match_facts, with_subject


def test_matching_is_one_to_one_most_similar_pairs_first():
    extracted = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
    gold = [[1.0, 0.0], [0.6, 0.8]]
    m = match_facts(extracted, gold, threshold=0.7)
    # pairs >= 0.7: e0-g0 1.0, e2-g1 0.99, e1-g1 0.8, e2-g0 0.71 -> e0-g0 and e2-g1 are taken; e1 has nothing left
    assert m.matched == 2
    assert m.precision == pytest.approx(2 / 3)
    assert m.recall == 1.0
    assert m.f1 == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))


def test_one_vague_memory_cannot_find_several_gold_facts():
    m = match_facts([[1.0, 0.1]], [[1.0, 0.0], [1.0, 0.2], [1.0, 0.15]], threshold=0.7)
    assert (m.matched, m.precision, m.recall) == (1, 1.0, pytest.approx(1 / 3))


def test_nothing_extracted_gives_no_precision_and_zero_f1():
    m = match_facts([], [[1.0, 0.0]], threshold=0.7)
    assert m.precision is None and m.recall == 0.0 and m.f1 == 0.0


def test_duplicates_count_memories_close_to_an_earlier_one():
    assert count_duplicates([[1, 0], [0.99, 0.05], [0, 1], [0.02, 1]], threshold=0.95) == 2
    assert count_duplicates([[1, 0]], threshold=0.5) == 0


def test_the_subject_is_put_in_front_of_a_memory_that_lacks_it():
    assert with_subject("Lives in Lisbon", "Caroline") == "Caroline Lives in Lisbon"
    assert with_subject("Caroline paints", "Caroline") == "Caroline paints"
    assert with_subject("Lives in Lisbon", None) == "Lives in Lisbon"


def test_fact_match_evaluator_counts_only_gold_facts_from_replayed_turns(minilm):
    outputs = ExtractionOutput(
        conversation_id="c",
        model="offline",
        speakers=[
            SpeakerOutput(
                speaker="Caroline",
                memories=["Attended an LGBTQ support group", "Likes pizza", "Likes pizza a lot"],
                replayed_turn_ids=["D1:1", "D1:2"],
                node_runs=1,
            )
        ],
        calls=1,
        input_tokens=0,
        output_tokens=0,
        wall_seconds=0.1,
    ).model_dump()
    reference = ExtractionReference(
        source="locomo",
        gold={
            "Caroline": [
                GoldFactRecord(text="Caroline attended an LGBTQ support group recently.", turn_id="D1:1"),
                GoldFactRecord(text="Caroline is researching adoption agencies.", turn_id="D9:1"),  # not replayed
            ]
        },
        subjects={"Caroline": "Caroline"},
    ).model_dump()
    scores = {r["key"]: r["score"] for r in make_fact_match_evaluator(minilm.embeddings.embed_documents, 0.7, 0.85)(outputs, reference)}
    assert scores["gold_facts"] == 1
    assert scores["fact_recall"] == 1.0
    assert scores["fact_precision"] == pytest.approx(1 / 3)
    assert scores["duplicates"] == 1
