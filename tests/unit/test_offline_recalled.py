"""The offline model quotes what the user stated in earlier conversations, dated and named by its
chat, when it bears on the message; what the user only asked is never quoted or counted."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage

from core.statements import states_something
from offline_model.model import offline_reply
from prompts.reply_prompt import build_prompt

MARCH = datetime(2025, 3, 2, 18, 30, tzinfo=timezone.utc)
APRIL = datetime(2025, 4, 9, 9, 0, tzinfo=timezone.utc)


def line(role: str, text: str, when: datetime) -> dict:
    return {"message_id": text[:8], "role": role, "sent_at": when.isoformat(), "text": text}


def reply_to(words: str, excerpts: list[dict], profile: dict | None = None) -> str:
    loaded = {"profile": profile or {}, "excerpts": excerpts}
    prompt = build_prompt(persona_text="You help.", loaded_context=loaded, summary_text="", knowledge=[], recent=[], current=HumanMessage(words))
    return offline_reply(prompt.messages)


MOVING_CHAT = {
    "thread_id": "t1",
    "chat_title": "Moving",
    "lines": [
        line("user", "I'm moving to Lisbon in the spring.", MARCH),
        line("assistant", "(offline model) I don't know anything about you yet.", MARCH),
    ],
}


def test_a_question_about_what_was_said_is_answered_with_the_dated_quote_and_its_chat():
    reply = reply_to("When did I say I was moving?", [MOVING_CHAT])
    assert reply == "(offline model) On 2 March 2025, in 'Moving', you said: \"I'm moving to Lisbon in the spring.\""


def test_the_quote_comes_first_and_what_is_known_follows():
    reply = reply_to("When did I say I was moving?", [MOVING_CHAT], profile={"name": "Dana"})
    assert reply.startswith("(offline model) On 2 March 2025, in 'Moving', you said:") and "I know: your name is Dana." in reply


def test_a_line_said_on_another_day_than_its_excerpt_carries_its_own_date():
    chat = {**MOVING_CHAT, "lines": [line("user", "Hello there, new chat.", MARCH), line("user", "The move to Lisbon is in May now.", APRIL)]}
    assert "On 9 April 2025, in 'Moving', you said: \"The move to Lisbon is in May now.\"" in reply_to("When is my move?", [chat])


def test_questions_the_user_asked_and_excerpts_that_do_not_bear_on_the_message_are_not_quoted():
    asked = {"thread_id": "t2", "chat_title": "Asked", "lines": [line("user", "When did I say I was moving?", APRIL)]}
    other = {"thread_id": "t3", "chat_title": "Pets", "lines": [line("user", "My cat is called Luna.", APRIL)]}
    reply = reply_to("When did I say I was moving?", [MOVING_CHAT, asked, other])
    assert reply.count("you said:") == 1 and "Luna" not in reply and "'Asked'" not in reply


def test_without_excerpts_the_reply_is_as_before():
    assert reply_to("When did I say I was moving?", []).startswith("(offline model) I don't know anything about you yet.")


@pytest.mark.parametrize(
    ("text", "states"),
    [
        ("I'm moving to Lisbon in the spring.", True),
        ("My name is Dana", True),
        ("Remind me to renew my passport next month.", True),
        ("When did I say I was moving?", False),
        ("when did i say i was moving", False),
        ("Tell me what I said about Lisbon.", False),
        ("Do you remember where I live", False),
        ("Thanks!", False),
        ("Hi! What do you know about me?", False),
        ("Thanks. I moved to Porto in the end.", True),
    ],
)
def test_what_counts_as_stating_something(text, states):
    assert states_something(text) is states


def test_a_messages_statement_check_is_worked_out_once_however_many_turns_count_it(monkeypatch):
    """record_chat counts the statements of a chat's every user message at each turn."""
    import core.statements as statements

    calls = []
    real = statements.is_statement
    monkeypatch.setattr(statements, "_STATED", {})
    monkeypatch.setattr(statements, "is_statement", lambda s: calls.append(s) or real(s))
    text = "I moved to Porto in the end. Do you like it there?"
    # a new string each time, as each turn reads it from the checkpoint
    assert [statements.states_something((text + " ")[:-1]) for _ in range(5)] == [True] * 5
    assert len(calls) == 1  # the first sentence states: the second is never read
    assert statements.states_something("Do you like Porto?") is False and len(calls) == 2


@pytest.mark.parametrize(
    ("question", "about"),
    [
        ("When did I say I was moving?", "I was moving"),
        ("what did I tell you about my move", "my move"),
        ("Do you remember when I said I was moving to Lisbon?", "I was moving to Lisbon"),
        ("Did I ever mention my sister?", "my sister"),
        ("When did I say that?", None),  # names nothing to look for
        ("Where is Lisbon?", None),
    ],
)
def test_a_question_about_what_was_said_is_a_search_for_what_it_names(question, about):
    from core.statements import reported

    assert reported(question) == about
