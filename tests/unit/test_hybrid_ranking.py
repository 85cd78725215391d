"""Reciprocal rank fusion and MMR diversification (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.hybrid_ranking import RelevanceGate, cosine_similarities, mmr_select, reciprocal_rank_fusion
from knowledge.retrieval import RetrievedChunk, mmr_relevance

# --------------------------------------------------------------------------- RRF


def test_rrf_score_is_the_sum_of_one_over_k_plus_rank():
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["b", "c"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)


def test_rrf_ranks_an_item_found_by_both_lists_above_items_found_by_one():
    fused = reciprocal_rank_fusion([["v1", "both", "v3"], ["t1", "t2", "both"]])
    assert fused[0][0] == "both"


def test_rrf_breaks_ties_by_first_appearance():
    fused = reciprocal_rank_fusion([["a", "b"], ["c", "d"]])
    assert [item for item, _ in fused] == ["a", "c", "b", "d"]


def test_rrf_counts_a_repeated_item_once_per_list_at_its_best_rank():
    fused = dict(reciprocal_rank_fusion([["a", "a", "b"]], k=0))
    assert fused == {"a": 1.0, "b": pytest.approx(1 / 3)}


def test_rrf_weights_scale_each_lists_contribution():
    fused = dict(reciprocal_rank_fusion([["a"], ["b"]], k=0, weights=[1.0, 2.0]))
    assert fused == {"a": 1.0, "b": 2.0}


def test_rrf_of_no_lists_or_empty_lists_is_empty():
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


def test_rrf_rejects_a_wrong_number_of_weights():
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])


# --------------------------------------------------------------------------- MMR


def unit(*values: float) -> list[float]:
    v = np.asarray(values, dtype=float)
    return list(v / np.linalg.norm(v))


def test_mmr_picks_the_most_relevant_candidate_first():
    vectors = [unit(1, 0, 0), unit(0, 1, 0), unit(0, 0, 1)]
    assert mmr_select(vectors, [0.2, 0.9, 0.5], k=1) == [1]


def test_mmr_never_returns_a_near_duplicate_of_a_chosen_candidate():
    vectors = [unit(1, 0, 0), unit(1, 0.01, 0), unit(0, 1, 0)]  # 0 and 1 are near-duplicates
    chosen = mmr_select(vectors, [1.0, 0.99, 0.3], k=3)
    assert chosen == [0, 2]


def test_mmr_with_plain_lambda_prefers_a_different_candidate_over_a_similar_one():
    vectors = [unit(1, 0), unit(1, 0.6), unit(0, 1)]  # 1 is similar to 0 (cos≈0.86) but not a duplicate
    chosen = mmr_select(vectors, [1.0, 0.95, 0.8], k=2, lambda_mult=0.5)
    assert chosen == [0, 2]


def test_mmr_with_lambda_one_is_plain_relevance_order():
    vectors = [unit(1, 0), unit(1, 0.6), unit(0, 1)]
    assert mmr_select(vectors, [1.0, 0.95, 0.8], k=3, lambda_mult=1.0) == [0, 1, 2]


def test_mmr_returns_at_most_k():
    vectors = np.eye(5)
    assert len(mmr_select(vectors, [5, 4, 3, 2, 1], k=3)) == 3


def test_mmr_keeps_the_chosen_tokens_within_the_budget_and_fills_with_a_smaller_later_candidate():
    vectors = np.eye(4)
    chosen = mmr_select(vectors, [1.0, 0.9, 0.8, 0.7], k=4, token_costs=[500, 600, 400, 100], token_budget=1000)
    assert chosen == [0, 2, 3]  # 1 (600) no longer fits after 0 (500); 2 and 3 still do
    assert sum([500, 600, 400, 100][i] for i in chosen) <= 1000


def test_mmr_returns_nothing_when_no_candidate_fits_the_budget():
    assert mmr_select(np.eye(2), [1, 1], k=2, token_costs=[50, 60], token_budget=10) == []


def test_mmr_handles_zero_vectors_and_empty_input():
    assert mmr_select(np.zeros((2, 3)), [1.0, 0.5], k=2) == [0, 1]
    assert mmr_select(np.zeros((0, 3)), [], k=3) == []
    assert mmr_select(np.eye(2), [1, 1], k=0) == []


def test_mmr_validates_its_inputs():
    with pytest.raises(ValueError):
        mmr_select(np.eye(2), [1.0], k=1)
    with pytest.raises(ValueError):
        mmr_select(np.eye(2), [1.0, 1.0], k=1, lambda_mult=1.5)
    with pytest.raises(ValueError):
        mmr_select(np.eye(2), [1.0, 1.0], k=1, token_costs=[1])


def test_cosine_similarities_ignore_vector_length():
    sims = cosine_similarities([2, 0], [[1, 0], [0, 3], [-5, 0]])
    assert sims == pytest.approx([1.0, 0.0, -1.0])


# --------------------------------------------------------------------------- relevance gate


def test_the_gate_admits_a_close_chunk_on_similarity_alone():
    gate = RelevanceGate(min_similarity=0.36, min_similarity_text_match=0.32)
    assert gate.admits(0.36, text_match=False, whole_match=False)
    assert not gate.admits(0.35, text_match=False, whole_match=False)


def test_shared_words_vouch_only_for_a_middling_similarity_not_a_low_one():
    gate = RelevanceGate(min_similarity=0.36, min_similarity_text_match=0.32)
    assert gate.admits(0.33, text_match=True, whole_match=False)
    assert not gate.admits(0.28, text_match=True, whole_match=False)  # "I live in Haifa" vs the README's quickstart


def test_a_chunk_holding_every_word_of_the_query_passes_whatever_its_similarity():
    gate = RelevanceGate()
    assert gate.admits(0.05, text_match=True, whole_match=True)  # a product code looked up on its own
    assert gate.admits(None, text_match=True, whole_match=True)
    assert not gate.admits(None, text_match=True, whole_match=False)  # no vector, no full match: no evidence


def test_most_of_the_questions_weighted_words_vouch_for_a_low_similarity_but_not_a_negligible_one():
    gate = RelevanceGate(min_similarity=0.38, min_similarity_text_match=0.34, min_similarity_covered=0.19, min_coverage=0.5)
    # A settings table holding "rag_top_k" and "default": it embeds poorly, but its words are the question's.
    assert gate.admits(0.2, text_match=True, whole_match=False, coverage=0.6)
    assert not gate.admits(0.2, text_match=True, whole_match=False, coverage=0.4)  # a few common words only
    # A chunk quoting a whole unrelated question: every word, but the vectors disagree.
    assert not gate.admits(0.07, text_match=True, whole_match=False, coverage=1.0)
    # Coverage is a property of a full-text match; without one it vouches for nothing.
    assert not gate.admits(0.2, text_match=False, whole_match=False, coverage=1.0)


# --------------------------------------------------------------------------- MMR's relevance


def _chunk(cid: int, similarity: float | None, *, whole_match: bool = False, rrf: float = 0.03, coverage: float = 0.0,
           tokens: int = 10):
    return RetrievedChunk(
        id=cid, source="doc.md", chunk_index=cid, heading_path="", content="x", collection="default",
        rrf_score=rrf, vector_similarity=similarity, whole_match=whole_match, text_match=whole_match or coverage > 0,
        text_coverage=coverage, tokens=tokens,
    )


def test_mmr_weighs_cosine_relevance_so_the_closest_chunk_is_not_passed_over_for_diversity():
    # RRF scores a few per cent apart; the second candidate is by far the closest to the query
    # but resembles the first. On RRF relevance MMR took the first and a diverse third.
    chunks = [_chunk(1, 0.39, rrf=0.0307), _chunk(2, 0.62, rrf=0.0305), _chunk(3, 0.40, rrf=0.0300)]
    vectors = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
    on_rrf = mmr_select(vectors, [c.rrf_score for c in chunks], k=2)
    on_cosine = mmr_select(vectors, mmr_relevance(chunks), k=2)
    assert 1 not in on_rrf and on_cosine[0] == 1


def test_a_chunk_holding_a_whole_lookup_counts_as_relevant_as_the_closest_one():
    assert mmr_relevance([_chunk(1, 0.5), _chunk(2, 0.05, whole_match=True), _chunk(3, None), _chunk(4, -0.1)]) == [0.5, 0.5, 0.0, 0.0]


def test_a_chunk_holding_most_of_the_questions_words_is_packed_before_merely_similar_ones_fill_the_budget():
    # Room for two chunks. Two are similar to the question but hold a third of its weighted words;
    # the third holds most of them and embeds poorly (a quickstart's command block). On cosine alone
    # the budget was full before it came up.
    chunks = [
        _chunk(1, 0.50, coverage=0.40, tokens=360),
        _chunk(2, 0.40, coverage=0.27, tokens=330),
        _chunk(3, 0.29, coverage=0.80, tokens=310),
    ]
    vectors = np.eye(3)
    costs = [c.tokens for c in chunks]
    on_cosine = mmr_select(vectors, [c.vector_similarity for c in chunks], k=6, token_costs=costs, token_budget=700)
    assert on_cosine == [0, 1]
    assert mmr_select(vectors, mmr_relevance(chunks), k=6, token_costs=costs, token_budget=700) == [0, 2]


def test_coverage_adds_to_the_cosine_in_mmrs_relevance():
    assert mmr_relevance([_chunk(1, 0.4, coverage=0.5), _chunk(2, 0.5)], coverage_weight=0.2) == pytest.approx([0.5, 0.5])
    assert mmr_relevance([_chunk(1, 0.4, coverage=1.0), _chunk(2, None, coverage=1.0)], coverage_weight=0.0) == [0.4, 0.0]
