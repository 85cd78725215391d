"""The reply prompt says when the user's message was sent, and the days the conversation shown
before it spans: a model dates "yesterday", an excerpt's age and a resumed chat's turns against it."""

from datetime import datetime, timezone

from langchain_core.messages import AIMessage, HumanMessage

from core.messages import stamp_sent_at
from prompts.reply_prompt import MESSAGE_HEADER, NOW_HEADER, PromptBudgets, build_prompt, found_apart, parse_sections

NOW = datetime(2023, 11, 23, 9, 30, tzinfo=timezone.utc)


def _said(cls, text: str, when: datetime):
    return stamp_sent_at(cls(text, id=f"m-{text[:6]}-{when:%d%H}"), when)


def _current(text: str = "When did I adopt Scout?", when: datetime = NOW):
    return _said(HumanMessage, text, when)


def _built(recent=(), current=None, **kwargs):
    return build_prompt(persona_text="You help.", loaded_context={}, summary_text="", knowledge=[], recent=list(recent),
                        current=current or _current(), **kwargs)


def test_the_message_opens_with_its_day_and_time_in_utc():
    built = _built()
    assert parse_sections(built.messages)[NOW_HEADER] == "Thursday, 23 November 2023, 09:30 UTC."
    found, words = found_apart(built.messages[-1])
    assert NOW_HEADER in found and words == "When did I adopt Scout?"
    assert built.section_tokens["now"] > 0


def test_a_time_in_another_zone_is_said_in_utc():
    local = datetime.fromisoformat("2023-11-23T01:15:00-08:00")
    assert parse_sections(_built(current=_current(when=local)).messages)[NOW_HEADER] == "Thursday, 23 November 2023, 09:15 UTC."


def test_the_days_the_conversation_above_spans_are_said():
    yesterday = [_said(HumanMessage, "I adopted a dog the other day", datetime(2023, 11, 22, 9, 2, tzinfo=timezone.utc)),
                 _said(AIMessage, "What is the pup's name?", datetime(2023, 11, 22, 9, 3, tzinfo=timezone.utc))]
    assert parse_sections(_built(yesterday).messages)[NOW_HEADER].endswith("The conversation above is from 22 November 2023.")
    today = [_said(HumanMessage, "Hello", datetime(2023, 11, 23, 9, 0, tzinfo=timezone.utc))]
    assert parse_sections(_built(today).messages)[NOW_HEADER].endswith("The conversation above is from today.")
    both = [yesterday[0], today[0]]
    assert parse_sections(_built(both).messages)[NOW_HEADER].endswith("The conversation above runs from 22 November 2023 to today.")


def test_a_message_with_no_time_gets_no_now_section():
    assert NOW_HEADER not in parse_sections(_built(current=HumanMessage("Hi!")).messages)


def test_the_brief_layout_shows_the_words_alone_when_memory_found_nothing_and_the_time_with_what_it_found():
    assert _built(current=_current("Hi!"), brief=True).messages[-1].text == "Hi!"  # a small model recited a lone time
    found = build_prompt(persona_text="You help.", loaded_context={"profile": {"name": "Dana"}}, summary_text="", knowledge=[], recent=[],
                         current=_current("Hi!"), brief=True)
    assert NOW_HEADER in found.messages[-1].text and "Dana" in found.messages[-1].text


def test_the_now_section_counts_within_the_whole_budget():
    excerpts = [{"thread_id": "t1", "chat_title": "Chat", "score": 1.0, "lines": [
        {"message_id": f"e{i}", "position": i, "role": "user", "sent_at": "2023-05-08T13:00:00+00:00", "text": "word " * 60}]} for i in range(40)]
    built = build_prompt(persona_text="You help.", loaded_context={"excerpts": excerpts}, summary_text="", knowledge=[], recent=[],
                         current=_current(), budgets=PromptBudgets(total=800))
    from core.tokens import count_message_tokens

    assert count_message_tokens(built.messages) <= 800
    assert MESSAGE_HEADER in built.messages[-1].text and NOW_HEADER in built.messages[-1].text
