"""The retrieval eval's labelled set and the gate calibration (pure parts; the run is in tests/integration)."""

from __future__ import annotations

import pytest

from evals.retrieval_eval import Candidate, RetrievalQuery, _score, calibrate, load_retrieval_set
from knowledge.hybrid_ranking import RelevanceGate


def test_the_shipped_set_has_60_queries_over_shipped_documents_half_unrelated_and_both_splits():
    data = load_retrieval_set()  # also checks every corpus path exists
    related = [q for q in data.queries if q.related]
    unrelated = [q for q in data.queries if not q.related]
    assert len(data.queries) >= 60 and abs(len(related) - len(unrelated)) <= 2
    for group in (related, unrelated):
        splits = [q.split for q in group]
        assert abs(splits.count("calibration") - splits.count("held_out")) <= 1
    assert {"I'm hungry, any ideas for dinner?", "My name is Lee."} <= {q.query for q in unrelated}
    assert len({q.query for q in data.queries}) == len(data.queries)


def test_a_related_query_must_name_its_sections_and_an_unrelated_one_none():
    with pytest.raises(ValueError):
        RetrievalQuery(query="how do I install it?", related=True, relevant=[], split="calibration")
    with pytest.raises(ValueError):
        RetrievalQuery(query="hi", related=False, relevant=[{"source": "README.md"}], split="held_out")


def sample(related: bool, *sims: float, text: bool = False, relevant: bool = True) -> tuple[bool, list[Candidate]]:
    return related, [Candidate(s, text, False, related and relevant and i == 0) for i, s in enumerate(sims)]


def test_calibration_puts_the_floor_between_the_classes_with_the_widest_margin():
    samples = [sample(True, 0.62, 0.3), sample(True, 0.48), sample(False, 0.21, 0.1), sample(False, 0.30)]
    fit = calibrate(samples)
    assert (fit.related_admitted, fit.unrelated_admitted) == (1.0, 0.0)
    # Midway between the lowest related (0.48) and the highest unrelated (0.30) similarity.
    assert 0.38 <= fit.min_similarity <= 0.40


def test_calibration_uses_shared_words_when_they_separate_better_than_similarity_alone():
    # A related message at 0.33 that shares words, an unrelated one at 0.35 that does not.
    samples = [sample(True, 0.33, text=True), sample(True, 0.6), sample(False, 0.35), sample(False, 0.2, text=True)]
    fit = calibrate(samples)
    assert (fit.related_admitted, fit.unrelated_admitted) == (1.0, 0.0)
    assert fit.min_similarity > 0.35 and 0.2 < fit.min_similarity_text_match <= 0.33


def test_calibration_fits_the_coverage_floor_when_a_related_chunk_embeds_poorly_but_holds_the_words():
    # A related chunk at 0.22 holding most of the question's words; unrelated chunks at 0.30 sharing
    # a word and at 0.08 quoting the whole question.
    samples = [
        (True, [Candidate(0.22, True, False, True, coverage=0.8)]),
        (True, [Candidate(0.6, True, False, True, coverage=0.3)]),
        (False, [Candidate(0.30, True, False, False, coverage=0.2)]),
        (False, [Candidate(0.08, True, False, False, coverage=1.0)]),
    ]
    fit = calibrate(samples)
    assert (fit.related_admitted, fit.unrelated_admitted) == (1.0, 0.0)
    assert 0.08 < fit.min_similarity_covered <= 0.22 < 0.30 < fit.min_similarity_text_match


def test_the_fitted_gate_scores_what_the_calibration_reports():
    samples = [
        (True, [Candidate(0.22, True, False, True, coverage=0.8), Candidate(0.41, True, False, False, coverage=0.1)]),
        (True, [Candidate(0.45, False, False, True)]),
        (True, [Candidate(0.31, True, False, True, coverage=0.2)]),  # no floor admits it without two leaks
        (False, [Candidate(0.33, True, False, False, coverage=0.3), Candidate(None, False, False, False)]),
        (False, [Candidate(0.32, True, False, False, coverage=0.1)]),
        (False, [Candidate(0.12, True, False, False, coverage=0.9)]),
        (False, []),
    ]
    fit = calibrate(samples)
    gate = RelevanceGate(fit.min_similarity, fit.min_similarity_text_match, fit.min_similarity_covered)
    score, margin, hit, leak = _score(gate, samples)
    assert (hit, leak) == (fit.related_admitted, fit.unrelated_admitted) == (2 / 3, 0.0)
    assert gate.admits(0.22, text_match=True, whole_match=False, coverage=0.8)
    assert margin > 0
