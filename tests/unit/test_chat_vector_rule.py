"""When a chat's stored vector may stand for its new text (memory.writer.records.vector_still_serves),
and what the text is made of (memory.chat_text.searchable_text)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from core.schemas import ChatRecord, SummaryBoard
from memory.writer.records import VECTOR_LAG_MESSAGES, vector_still_serves
from memory.chat_text import OPENING_SEARCH_CHARS, RECENT_SEARCH_CHARS, retitled_text, searchable_text

OPENING = HumanMessage("I want to repaint the kitchen", id="m1")


def chat(*texts: str) -> list:
    """The opening, then a user message and a reply for each text (ids m2, m3, …)."""
    messages = [OPENING, AIMessage("Which colour?", id="a1")]
    for i, text in enumerate(texts):
        messages += [HumanMessage(text, id=f"m{i + 2}"), AIMessage("Noted.", id=f"a{i + 2}")]
    return messages


def stored(messages: list, **fields) -> ChatRecord:
    made = searchable_text(SummaryBoard(), messages, title="Kitchen paint", opening=OPENING)
    return ChatRecord(thread_id="t1", summary_text=made.text, vector_parts=list(made.parts), message_count=len(messages), vector_messages=len(messages), **fields)


def serves(before: ChatRecord, messages: list, *, title: str = "Kitchen paint") -> bool:
    now = searchable_text(SummaryBoard(), messages, title=title, opening=OPENING)
    return vector_still_serves(before, ChatRecord(thread_id="t1", summary_text=now.text, message_count=len(messages)), now.parts)


def test_the_stored_vector_serves_a_text_that_only_grew_by_fewer_messages_than_allowed():
    before = stored(chat("Sage green"))
    assert serves(before, chat("Sage green", "Matt finish"))
    grown = chat("Sage green", *[f"line {i}" for i in range(VECTOR_LAG_MESSAGES // 2)])
    assert len(grown) - before.message_count >= VECTOR_LAG_MESSAGES and not serves(before, grown)


def test_a_line_edited_deleted_redacted_or_pushed_out_and_a_new_head_make_the_vector_again():
    before = stored(chat("Sage green", "My bank is Zorblatt"))
    assert not serves(before, chat("Sage green", "My bank is [forgotten]"))  # redacted or deleted: same id, new text
    edited = chat("Sage green") + [HumanMessage("My bank is Acme", id="m9"), AIMessage("Noted.", id="a9")]
    assert not serves(before, edited)  # an edit: a new message in its place
    assert not serves(before, chat("Sage green", "My bank is Zorblatt", "x" * RECENT_SEARCH_CHARS))  # pushed out of the text
    assert not serves(before, chat("Sage green", "My bank is Zorblatt", "Matt"), title="Kitchen repaint")  # the head changed


def test_a_record_whose_vector_parts_are_unknown_or_without_text_is_never_kept():
    messages = chat("Sage green")
    assert not serves(None, messages)
    assert not serves(stored(messages).model_copy(update={"vector_parts": []}), messages)  # a forget's, a rename's, an old record's
    assert not serves(stored(messages).model_copy(update={"summary_text": ""}), messages)  # no text: no vector stored
    assert not serves(stored(chat("Sage green", "Matt")), messages)  # fewer messages than the vector saw


def test_the_searchable_text_names_a_short_opening_once_and_keeps_a_long_ones_rest_among_the_newest_lines():
    made = searchable_text(SummaryBoard(), chat("Sage green, I think"), title="Kitchen paint", opening=OPENING)
    assert made.text == "Kitchen paint\nOpening: I want to repaint the kitchen\nRecently: Sage green, I think"
    assert len(made.parts) == 2  # the head, one line
    long_opening = HumanMessage("word " * OPENING_SEARCH_CHARS, id="m1")
    made = searchable_text(SummaryBoard(), [long_opening], title="Paste", opening=long_opening)
    assert "Recently: word" in made.text  # past what the head holds, still searchable


def test_a_renamed_text_is_the_one_searchable_text_makes_with_the_new_title():
    messages = chat("Sage green, maybe")
    for old, new in [("Kitchen paint", "Sage kitchen"), ("New chat", "Sage kitchen"), ("Kitchen paint", "New chat")]:
        before = searchable_text(SummaryBoard(), messages, title=old, opening=OPENING).text
        assert retitled_text(before, old, new) == searchable_text(SummaryBoard(), messages, title=new, opening=OPENING).text
    # a text whose first line is not the old title (written by an older version) keeps every line
    assert retitled_text("Opening: hello", "Kitchen paint", "Sage kitchen") == "Sage kitchen\nOpening: hello"
