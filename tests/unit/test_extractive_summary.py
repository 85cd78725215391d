"""Extractive summaries (the offline model's summarize/recompress calls): copied sentences, folded incrementally."""

from __future__ import annotations

import re

from core.tokens import count_tokens
from offline_model.extractive_summary import (
    EXTRACTIVE_PREFIX,
    compress_extractively,
    fold_extractively,
    parse_transcript,
    split_sentences,
    strip_prefix,
)
from core.schemas import SummaryBoard

FIRST_FOLD = [
    "[user] Hi there!",
    '[assistant] (offline model) I don\'t know anything about you yet. You said: "Hi there!"',
    "[user] My name is Dana and I live in Haifa with my dog Rex.",
    "[assistant] (offline model) I know: your name is Dana; you live in Haifa.",
    "[user] I work as a nurse at Rambam Hospital since 2015. Remind me to call the bank tomorrow.",
    '[tool search_knowledge] {"results": ["Nothing Relevant Here"]}',
    "[assistant] Sure, I will note it (called add_task({\"description\": \"call the bank\"}))",
    "[user] Rex loves the beach in Tel Aviv. What is the best time to visit the Galilee?",
]

SECOND_FOLD = [
    "[user] We are planning a trip to Rome in May 2025 with Noa.",
    "[assistant] Let's make a packing list for Rome.",
    "[user] I need to renew my passport before the trip.",
    "[user] Should I book a hotel near the Colosseum?",
]


def all_sources(lines: list[str]) -> str:
    return " ".join(turn.text for turn in parse_transcript(lines))


def test_summary_starts_with_extractive_marker_exactly_once():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    again = fold_extractively(board, SECOND_FOLD)
    for b in (board, again):
        assert b.summary.startswith(EXTRACTIVE_PREFIX)
        assert b.summary.count("(extractive)") == 1


def test_summary_only_copies_sentences_from_the_transcript():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    source = all_sources(FIRST_FOLD)
    for sentence in split_sentences(strip_prefix(board.summary)):
        assert sentence in source


def test_greetings_offline_echoes_tool_output_and_questions_stay_out_of_the_summary():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert "Hi there" not in board.summary
    assert "offline model" not in board.summary
    assert "Nothing Relevant Here" not in board.render()
    assert "Galilee?" not in board.summary
    assert "My name is Dana and I live in Haifa with my dog Rex." in board.summary


def test_key_facts_are_first_person_user_statements_with_a_number_or_proper_noun():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert board.key_facts == [
        "My name is Dana and I live in Haifa with my dog Rex",
        "I work as a nurse at Rambam Hospital since 2015",
    ]


def test_fold_is_incremental_previous_key_facts_kept_and_new_ones_added():
    first = fold_extractively(SummaryBoard(), FIRST_FOLD)
    second = fold_extractively(first, SECOND_FOLD, max_sentences=10)
    assert second.key_facts[: len(first.key_facts)] == first.key_facts
    assert "We are planning a trip to Rome in May 2025 with Noa" in second.key_facts
    assert set(first.entities) <= set(second.entities)
    # previous summary sentences survive the fold when there is room
    for sentence in split_sentences(strip_prefix(first.summary)):
        assert sentence in second.summary


def test_refolding_the_same_lines_does_not_duplicate_anything():
    first = fold_extractively(SummaryBoard(), FIRST_FOLD)
    again = fold_extractively(first, FIRST_FOLD)
    assert again.key_facts == first.key_facts
    assert again.entities == first.entities
    assert again.action_items == first.action_items
    assert split_sentences(strip_prefix(again.summary)) == split_sentences(strip_prefix(first.summary))


def test_summary_is_capped_to_max_sentences_dropping_the_least_informative():
    first = fold_extractively(SummaryBoard(), FIRST_FOLD)
    second = fold_extractively(first, SECOND_FOLD, max_sentences=3)
    kept = split_sentences(strip_prefix(second.summary))
    assert len(kept) == 3
    assert "We are planning a trip to Rome in May 2025 with Noa." in kept  # numbers + proper nouns
    assert "Remind me to call the bank tomorrow." not in kept  # low information, older


def test_max_sentences_of_one_keeps_a_single_sentence():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD + SECOND_FOLD, max_sentences=1)
    assert len(split_sentences(strip_prefix(board.summary))) == 1


def test_entities_are_proper_nouns_including_multiword_ones_not_sentence_starts():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert {"Dana", "Haifa", "Rex", "Rambam Hospital", "Tel Aviv", "Galilee"} <= set(board.entities)
    assert "My" not in board.entities and "What" not in board.entities and "I" not in board.entities


def test_topics_are_frequent_content_words():
    lines = [
        "[user] I am learning Italian grammar.",
        "[user] Italian verbs are hard, especially irregular verbs.",
        "[assistant] Italian verbs have three conjugations.",
    ]
    board = fold_extractively(SummaryBoard(), lines)
    assert board.topics[:2] == ["italian", "verbs"]
    assert not {"the", "are", "have", "extractive", "offline"} & set(board.topics)


def test_action_items_come_from_reminders_needs_todos_and_lets():
    first = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert first.action_items == ["Remind me to call the bank tomorrow"]
    second = fold_extractively(first, SECOND_FOLD)
    assert second.action_items == [
        "Remind me to call the bank tomorrow",
        "Let's make a packing list for Rome",
        "I need to renew my passport before the trip",
    ]


def test_pending_questions_are_user_questions_without_a_real_answer_after_them():
    first = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert first.pending_questions == ["What is the best time to visit the Galilee?"]
    answered = fold_extractively(
        SummaryBoard(), ["[user] What is the capital of Italy?", "[assistant] The capital of Italy is Rome."]
    )
    assert answered.pending_questions == []
    echoed = fold_extractively(
        SummaryBoard(), ["[user] What is the capital of Italy?", "[assistant] (offline model) I don't know anything about you yet."]
    )
    assert echoed.pending_questions == ["What is the capital of Italy?"]


def test_empty_fold_of_an_empty_board_stays_empty():
    assert fold_extractively(SummaryBoard(), []).is_empty()
    assert fold_extractively(SummaryBoard(), ["[user] Hi!", "[assistant] (offline model) hello"]).summary == ""


def test_fold_is_deterministic():
    a = fold_extractively(fold_extractively(SummaryBoard(), FIRST_FOLD), SECOND_FOLD, max_sentences=4)
    b = fold_extractively(fold_extractively(SummaryBoard(), FIRST_FOLD), SECOND_FOLD, max_sentences=4)
    assert a.model_dump() == b.model_dump()


def test_compress_extractively_fits_max_tokens_for_many_budgets():
    board = fold_extractively(fold_extractively(SummaryBoard(), FIRST_FOLD), SECOND_FOLD)
    full = count_tokens(board.render())
    for budget in (full + 10, full, full - 20, 60, 40, 20, 8, 3, 0):
        compressed = compress_extractively(board, budget)
        assert count_tokens(compressed.render()) <= budget, budget


def test_compress_extractively_leaves_a_board_that_already_fits_unchanged():
    board = fold_extractively(SummaryBoard(), FIRST_FOLD)
    assert compress_extractively(board, 10_000) == board


def test_compress_extractively_only_removes_it_never_rewrites():
    board = fold_extractively(fold_extractively(SummaryBoard(), FIRST_FOLD), SECOND_FOLD)
    compressed = compress_extractively(board, 70)
    assert compressed.summary.startswith(EXTRACTIVE_PREFIX)
    assert set(compressed.key_facts) <= set(board.key_facts)
    assert set(compressed.entities) <= set(board.entities)
    for sentence in split_sentences(strip_prefix(compressed.summary)):
        assert sentence.rstrip("…") in board.summary
    # key facts (names, numbers) outlive the pending questions and surplus action items
    assert compressed.key_facts
    assert len(compressed.pending_questions) <= len(board.pending_questions)


def test_compress_does_not_modify_its_input():
    board = fold_extractively(fold_extractively(SummaryBoard(), FIRST_FOLD), SECOND_FOLD)
    before = board.model_dump()
    compress_extractively(board, 10)
    assert board.model_dump() == before


def test_transcript_parser_reads_roles_and_strips_tool_call_notes():
    turns = parse_transcript(FIRST_FOLD)
    assert [t.role for t in turns][:3] == ["user", "assistant", "user"]
    assert turns[1].echo and not turns[0].echo
    assert turns[5].role == "tool"
    assert turns[6].text == "Sure, I will note it"
    assert not re.search(r"called", turns[6].text)
