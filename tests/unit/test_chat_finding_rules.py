"""Titles from the first message, recognising "go back to the chat about …", and ranking chats (pure parts)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.schemas import ChatRecord, SummaryBoard, utcnow
from evals.chat_finding_eval import load_chat_finding_set
from memory.chat_search import chat_query, decide, rank, switch_request, word_share
from memory.chat_titles import keyword_title, needs_model_title


@pytest.mark.parametrize(
    "message, title",
    [
        ("Hi! I'm Maya, I'm a backend developer and my bank charged me twice for the same card payment", "My bank charged me twice"),
        ("How do I partition a Spark table by event date?", "Partition a Spark table by event date"),
        ("hello there, can you help me write a birthday message for my dad?", "Write a birthday message for my dad"),
        ("Ciao! Sono Giulia, vorrei imparare a fare il pane", "Vorrei imparare a fare il pane"),
        ("Please remind me to renew my passport next week", "Remind me to renew my passport"),
    ],
)
def test_a_keyword_title_names_the_topic_not_the_greeting_or_the_name(message, title):
    assert keyword_title(message) == title


def test_a_message_that_only_greets_keeps_its_own_words_as_title():
    assert keyword_title("Hi, I'm Dana") == "Hi, I'm Dana"
    assert keyword_title("   ") == "New chat"


def test_a_title_the_user_set_is_never_replaced_by_a_summary_title():
    board = SummaryBoard(summary="Bank dispute", topics=["bank"])
    assert needs_model_title(ChatRecord(thread_id="t", title="Auto"), board)
    assert not needs_model_title(ChatRecord(thread_id="t", title="Mine", title_by_user=True), board)


@pytest.mark.parametrize(
    "message, topic",
    [
        ("go back to the chat about the bank", "the bank"),
        ("Can you open my conversation where we talked about Crete?", "Crete"),
        ("let's go back to the conversation on taxes.", "taxes"),
        ("switch to the old chat regarding my knee", "my knee"),
        ("torna alla chat sul mutuo", "mutuo"),
    ],
)
def test_a_request_to_switch_chats_is_recognised_with_its_topic(message, topic):
    assert switch_request(message) == topic


@pytest.mark.parametrize(
    "message",
    [
        "I had a great chat about the bank with my sister yesterday",
        "open the door",
        "what did we say about the bank?",
        "go back to the chat about the bank " + "and then tell me everything you know about mortgages " * 2,
    ],
)
def test_an_ordinary_message_is_not_taken_for_a_switch(message):
    assert switch_request(message) is None


def test_the_framing_of_a_request_is_not_searched_for():
    assert chat_query("the one about baking bread with a starter") == "baking bread with a starter"
    assert chat_query("the chat where I was nervous before a test") == "I was nervous before a test"
    assert chat_query("my father's birthday party chat") == "my father's birthday party"
    assert chat_query("sourdough") == "sourdough"


def chat(title: str, text: str = "", days_ago: float = 0) -> ChatRecord:
    return ChatRecord(thread_id=title, title=title, summary_text=text, last_activity=utcnow() - timedelta(days=days_ago))


def test_a_word_the_request_shares_with_one_chat_makes_it_the_clear_match():
    bank, flat = chat("My bank charged me twice", "Opening: the refund takes five days"), chat("Save for a deposit on a flat")
    assert word_share("the bank", bank) == 1.0 and word_share("the bank", flat) == 0.0
    # Similar embeddings (both about money), but only one says "bank".
    ranked = rank([(bank, 0.27), (flat, 0.16)], utcnow(), "the bank")
    assert decide(ranked).outcome == "one" and decide(ranked).match.chat is bank
    assert decide(rank([(bank, 0.27), (flat, 0.16)], utcnow(), "money worries")).outcome == "several"


def test_an_old_chat_loses_to_an_equally_similar_recent_one():
    old, new = chat("Trip A", days_ago=28), chat("Trip B")
    assert [r.chat for r in rank([(old, 0.5), (new, 0.5)], utcnow(), "trip")] == [new, old]


def test_the_shipped_chat_finding_set_has_30_chats_and_30_requests_naming_them():
    data = load_chat_finding_set()
    assert len(data.chats) >= 30 and len(data.queries) >= 30
    assert {q.chat for q in data.queries} <= {c.id for c in data.chats}
