"""Eval metrics: LoCoMo token F1, ROUGE, lexical recall, bootstrap, token counts."""

from __future__ import annotations

import math

import pytest

from evals.metrics import (
    EXTENDED_REFUSAL_MARKERS,
    answer_tokens,
    bootstrap_ci,
    bootstrap_diff,
    count_message_tokens,
    count_tokens,
    decide_winner,
    f1,
    f1_multi_answer,
    group_means,
    is_refusal,
    lexical_recall,
    lexical_recall_multi,
    normalize_answer,
    rouge_l,
    rouge_n,
    rouge_scores,
    rouge_tokenize,
    score_qa,
)

# ---------------------------------------------------------------- token F1


def test_f1_exact_match_scores_one():
    assert f1("Transgender woman", "Transgender woman") == 1.0


def test_f1_disjoint_answers_score_zero():
    assert f1("blue bicycle", "red car") == 0.0


def test_f1_partial_overlap_matches_hand_computation():
    # pred tokens: red car is fast (article dropped); gold: red car
    # overlap 2 -> P = 2/4, R = 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 2/3
    assert f1("the red car is fast", "a red car") == pytest.approx(2 / 3)


def test_f1_ignores_articles_punctuation_and_case():
    assert f1("The Eiffel Tower!", "eiffel tower") == 1.0
    assert normalize_answer("An Apple, the Pear.") == "apple pear"


def test_f1_drops_and_like_locomo_normaliser():
    # LoCoMo's remove_articles also removes "and"
    assert normalize_answer("cats and dogs") == "cats dogs"
    assert f1("cats and dogs", "cats dogs") == 1.0


def test_f1_porter_stemming_matches_inflections():
    assert f1("running", "runs") == 1.0
    assert answer_tokens("running", stem=False) != answer_tokens("runs", stem=False)


def test_f1_empty_prediction_scores_zero():
    assert f1("", "Paris") == 0.0


def test_multi_answer_f1_splits_on_commas_and_averages_over_gold_parts():
    # gold "London" found (1.0), gold "Berlin" not (0.0) -> mean 0.5
    assert f1_multi_answer("Paris, London", "London, Berlin") == pytest.approx(0.5)
    assert f1_multi_answer("London, Berlin", "Berlin, London") == 1.0


def test_category_1_uses_comma_splitting_while_category_4_does_not():
    # cat 1: pred has one part "London and Paris" -> tokens [london, pari];
    # against gold part "Paris": P=1/2, R=1 -> 2/3; same for "London" -> mean 2/3
    assert score_qa("London and Paris", "Paris, London", 1) == pytest.approx(2 / 3)
    # cat 4: plain bag of tokens, commas removed -> exact match
    assert score_qa("London and Paris", "Paris, London", 4) == 1.0


def test_category_3_scores_only_the_answer_part_before_semicolon():
    gold = "Likely no; she wants to be a counselor"
    assert score_qa("Likely no", gold, 3) == 1.0
    assert score_qa("Likely no", gold, 4) < 1.0


def test_category_5_rewards_only_locomo_refusal_phrases():
    assert score_qa("That is not mentioned in the conversation.", "anything", 5) == 1.0
    assert score_qa("No information available.", "anything", 5) == 1.0
    assert score_qa("Yes, she did.", "anything", 5) == 0.0
    assert score_qa("I don't know", "anything", 5) == 0.0


def test_extended_refusal_markers_are_opt_in():
    assert not is_refusal("I don't know")
    assert is_refusal("I don't know", EXTENDED_REFUSAL_MARKERS)
    assert score_qa("I don't know", "x", 5, refusal_markers=EXTENDED_REFUSAL_MARKERS) == 1.0


def test_integer_gold_answers_are_compared_as_strings():
    assert score_qa("In 2022", 2022, 2) == pytest.approx(2 / 3)
    assert score_qa("2022", 2022, 2) == 1.0


def test_category_0_free_form_uses_plain_f1_and_unknown_category_raises():
    assert score_qa("red car", "red car", 0) == 1.0
    with pytest.raises(ValueError):
        score_qa("x", "x", 7)


# ---------------------------------------------------------------- ROUGE


def test_rouge_tokenizer_lowercases_replaces_non_alphanumerics_and_stems_long_tokens():
    assert rouge_tokenize("Hello, WORLD-wide web!", stem=False) == ["hello", "world", "wide", "web"]
    # only tokens longer than 3 characters are stemmed (rouge-score behaviour)
    assert rouge_tokenize("killed cats ran", stem=True) == ["kill", "cat", "ran"]


def test_rouge_identical_text_scores_one_for_all_types():
    text = "Priya moved to Lisbon with her cat Biscuit."
    for score in rouge_scores(text, text).values():
        assert (score.precision, score.recall, score.fmeasure) == (1.0, 1.0, 1.0)


def test_rouge_1_2_l_match_hand_computed_values():
    pred, ref = "the cat sat on the mat", "the cat is on the mat"
    # unigrams: overlap the x2, cat, on, mat = 5 of 6 on each side
    r1 = rouge_n(pred, ref, 1)
    assert (r1.precision, r1.recall, r1.fmeasure) == pytest.approx((5 / 6, 5 / 6, 5 / 6))
    # bigrams: (the cat), (on the), (the mat) = 3 of 5
    r2 = rouge_n(pred, ref, 2)
    assert r2.fmeasure == pytest.approx(3 / 5)
    # LCS "the cat on the mat" = 5 tokens
    rl = rouge_l(pred, ref)
    assert rl.fmeasure == pytest.approx(5 / 6)


def test_rouge_precision_and_recall_are_asymmetric():
    s = rouge_n("cat", "the cat sat", 1, stem=False)
    assert s.precision == 1.0
    assert s.recall == pytest.approx(1 / 3)
    assert s.fmeasure == pytest.approx(2 * (1 / 3) / (4 / 3))


def test_rouge_stemming_is_default_and_can_be_disabled():
    assert rouge_n("police killed the gunman", "police kill the gunman", 1).fmeasure == 1.0
    assert rouge_n("police killed the gunman", "police kill the gunman", 1, stem=False).fmeasure == pytest.approx(
        0.75
    )


def test_rouge_l_is_order_sensitive_while_rouge_1_is_not():
    pred, ref = "the gunman killed police", "police killed the gunman"
    assert rouge_n(pred, ref, 1, stem=False).fmeasure == 1.0
    # longest common subsequence: "the gunman" (2 of 4)
    assert rouge_l(pred, ref, stem=False).fmeasure == pytest.approx(0.5)


def test_rouge_multi_reference_takes_the_best_reference():
    scores = rouge_scores("the cat", ["a dog barked", "the cat"])
    assert scores["rouge1"].fmeasure == 1.0
    assert scores["rougeL"].fmeasure == 1.0


def test_rouge_empty_prediction_scores_zero_and_no_reference_raises():
    assert rouge_scores("", "the cat")["rouge1"].fmeasure == 0.0
    with pytest.raises(ValueError):
        rouge_scores("x", [])


# ---------------------------------------------------------------- lexical recall


def test_lexical_recall_counts_stemmed_content_words_and_ignores_stopwords():
    # gold content tokens: eiffel, tower, pari ("the", "in" are stopwords)
    assert lexical_recall("The Eiffel Tower in Paris", "we saw the eiffel towers in paris") == 1.0


def test_lexical_recall_partial_match_is_a_fraction():
    assert lexical_recall("red bicycle", "she bought a red car") == pytest.approx(0.5)


def test_lexical_recall_keeps_all_stopword_answers_and_handles_empty_gold():
    assert lexical_recall("No", "No, she never went there") == 1.0
    assert lexical_recall("", "anything") == 0.0
    assert lexical_recall_multi(["blue", "red"], "a red car") == 1.0


# ---------------------------------------------------------------- bootstrap

SCORES_A = [0.50, 0.60, 0.70, 0.40, 0.55, 0.65, 0.45]


def test_bootstrap_ci_is_reproducible_with_a_fixed_seed_and_contains_the_mean():
    first = bootstrap_ci(SCORES_A, n_resamples=2000, seed=0)
    second = bootstrap_ci(SCORES_A, n_resamples=2000, seed=0)
    assert first == second
    mean, low, high = first
    assert mean == pytest.approx(sum(SCORES_A) / len(SCORES_A))
    assert low < mean < high
    assert 0.4 <= low and high <= 0.7  # inside the data range


def test_bootstrap_ci_of_constant_values_collapses_to_the_value():
    assert bootstrap_ci([0.3] * 5) == pytest.approx((0.3, 0.3, 0.3))


def test_bootstrap_rejects_empty_or_nan_values():
    with pytest.raises(ValueError):
        bootstrap_ci([])
    with pytest.raises(ValueError):
        bootstrap_ci([0.1, float("nan")])


def test_one_point_noisy_difference_on_seven_conversations_is_not_significant():
    # per-conversation differences +10, -8, +5, -6, +3, -2, +5 points: mean +1 point
    diffs = [0.10, -0.08, 0.05, -0.06, 0.03, -0.02, 0.05]
    scores_b = [a - d for a, d in zip(SCORES_A, diffs)]
    result = bootstrap_diff(SCORES_A, scores_b, seed=0)
    assert result.mean_diff == pytest.approx(0.01)
    assert result.low < 0 < result.high
    assert not result.significant
    decision = decide_winner({"a": SCORES_A, "b": scores_b})
    assert decision.best == "a"
    assert decision.margin == pytest.approx(0.01)
    assert decision.significant is False
    assert 0.5 < decision.confidence < 0.95


def test_large_consistent_difference_is_significant():
    diffs = [0.14, 0.16, 0.15, 0.13, 0.17, 0.15, 0.16]
    scores_b = [a - d for a, d in zip(SCORES_A, diffs)]
    decision = decide_winner({"baseline": scores_b, "summary": SCORES_A})
    assert decision.best == "summary"
    assert decision.runner_up == "baseline"
    assert decision.margin == pytest.approx(sum(diffs) / len(diffs))
    assert decision.ci_low > 0
    assert decision.significant is True
    assert decision.confidence == 1.0


def test_decide_winner_needs_aligned_scores_and_handles_a_single_variant():
    with pytest.raises(ValueError):
        decide_winner({"a": [0.1, 0.2], "b": [0.1]})
    solo = decide_winner({"only": [0.2, 0.4]})
    assert solo.best == "only" and solo.runner_up is None and not solo.significant


def test_group_means_aggregates_question_scores_per_conversation():
    assert group_means([1.0, 0.0, 0.5, 0.5], ["c1", "c1", "c2", "c2"]) == {"c1": 0.5, "c2": 0.5}


# ---------------------------------------------------------------- tokens


def test_count_tokens_is_ceiling_of_chars_over_four():
    assert count_tokens("") == 0
    assert count_tokens(None) == 0
    assert count_tokens("abcd") == 1
    assert count_tokens("abcde") == 2
    assert count_tokens("x" * 400) == 100


def test_count_message_tokens_delegates_to_langchain_approximation():
    from langchain_core.messages import HumanMessage

    text = "hello world!!"
    # LangChain adds the role ("user") to the characters and 3 tokens per message
    assert count_message_tokens([HumanMessage(text)]) == math.ceil((len(text) + len("user")) / 4) + 3
