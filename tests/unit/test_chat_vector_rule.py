"""When a chat's stored vector may stand for its new text (memory.writer.records.vector_still_serves),
and what the text is made of (nodes.record_chat.searchable_parts)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from core.schemas import ChatRecord, SummaryBoard
from memory.writer.records import VECTOR_LAG_MESSAGES, vector_still_serves
from nodes.record_chat import head_digest, searchable_parts


def record(head: str = "h", messages: int = 4, vector_messages: int = 2, text: str = "t") -> ChatRecord:
    return ChatRecord(thread_id="t1", summary_text=text, vector_head=head_digest(head), message_count=messages, vector_messages=vector_messages)


def test_the_stored_vector_serves_a_text_whose_head_is_unchanged_and_that_lags_fewer_messages_than_allowed():
    stored = record(messages=2, vector_messages=2)
    assert vector_still_serves(stored, record(messages=2 + VECTOR_LAG_MESSAGES - 1))
    assert not vector_still_serves(stored, record(messages=2 + VECTOR_LAG_MESSAGES))


def test_a_changed_head_no_stored_record_no_stored_text_or_fewer_messages_than_the_vector_saw_embed_again():
    stored = record(messages=2, vector_messages=2)
    assert not vector_still_serves(stored, record(head="another title"))
    assert not vector_still_serves(None, record())
    assert not vector_still_serves(record(text=""), record())  # no text: no vector was stored
    assert not vector_still_serves(stored, record(messages=1))  # an edit took messages away
    assert not vector_still_serves(stored.model_copy(update={"vector_head": ""}), record())  # a record from before the digest


def test_the_searchable_text_names_the_opening_once_and_keeps_the_newest_user_lines_apart():
    opening = "I want to repaint the kitchen"
    messages = [HumanMessage(opening), AIMessage("Which colour?"), HumanMessage("Sage green, I think")]
    head, newest = searchable_parts(SummaryBoard(), messages, title="Kitchen paint", opening=opening)
    assert head == "Kitchen paint\nOpening: I want to repaint the kitchen"
    assert newest == "Recently: Sage green, I think"
    assert searchable_parts(SummaryBoard(), messages[:1], title="Kitchen paint", opening=opening)[1] == ""
