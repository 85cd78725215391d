"""Dates that stay true: relative words resolved against the time the message was said, not the clock."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from core.dates import date_languages, dated, dated_task, due_phrase, redated_task, resolve_date
from llm.chat_model import load_chat_model
from memory.extractor import extract
from prompts.reply_prompt import render_user_context
from tests.support.scripted_model import ScriptedChatModel

WEDNESDAY = datetime(2026, 11, 25, 9, 30, tzinfo=timezone.utc)  # a Wednesday


@pytest.mark.parametrize(
    "words, meant",
    [
        ("next Tuesday", "2026-12-01"),
        ("tomorrow", "2026-11-26"),
        ("next month", "2026-12"),
        ("in two weeks", "2026-12-09"),
        ("on Friday", "2026-11-27"),
        ("by Friday", "2026-11-27"),
        ("next week", "2026-W49"),
        ("by the end of the month", "2026-11"),
        ("next year", "2027"),
        ("December 3", "2026-12-03"),
    ],
)
def test_relative_words_said_on_a_known_wednesday_mean_these_dates(words, meant):
    assert resolve_date(words, WEDNESDAY) == meant


def test_the_same_words_said_a_week_later_mean_a_week_later():
    assert resolve_date("tomorrow", datetime(2026, 12, 2, 9, tzinfo=timezone.utc)) == "2026-12-03"


def test_words_in_the_users_language_are_read_in_it():
    assert resolve_date("domani", WEDNESDAY, date_languages("domani", "Italian")) == "2026-11-26"
    assert resolve_date("מחר", WEDNESDAY, date_languages("תזכיר לי מחר")) == "2026-11-26"


def test_words_that_name_no_date_resolve_to_nothing():
    for words in ("later", "whenever", "someday", "", None):
        assert resolve_date(words, WEDNESDAY) is None


def test_a_number_alone_is_no_due_date_unless_it_is_a_year():
    """dateparser read a due of "1" or "-1" as January, "12" as December and "99" as 2099: a whole
    number alone says no date anyone can tell ("24.12" is a day and month, and stays one)."""
    for words in ("1", "-1", "+3", "12", "31", "99", "100", "by 5", "12345"):
        assert resolve_date(words, WEDNESDAY) is None, words
    assert resolve_date("2027", WEDNESDAY) == resolve_date("by 2027", WEDNESDAY) == "2027"
    assert resolve_date("3/4", WEDNESDAY) == "2027-03-04" and resolve_date("the 15th", WEDNESDAY) == "2026-12-15"
    assert resolve_date("24.12", WEDNESDAY, ("de",)) == "2026-12-24"


def test_words_said_at_the_calendars_edge_resolve_to_a_valid_iso_date_or_nothing():
    """A message's time is its sender's (a client's zero time is 0001-01-01): "next week" said then
    gave "1-W02", which the task's schema refused, and the turn's memory write failed with it;
    "next Friday" on 31 December 9999 overflowed."""
    zero_time, last_day = datetime(1, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, tzinfo=timezone.utc)
    assert resolve_date("next week", zero_time) == "0001-W02"
    assert resolve_date("next month", zero_time) == "0001-02"
    assert resolve_date("by the end of the year", zero_time) == "0001"
    for words in ("next week", "next month", "next year", "next Friday", "by the end of next month", "the 3rd of next month", "tomorrow"):
        assert resolve_date(words, last_day) is None


def test_a_task_moved_back_and_forth_says_its_date_once_with_its_time_of_day():
    """Redating left the old time of day behind and the old words of another language beside their
    date, so each move added to the text: "Call the dentist on Fri 11 Dec 2026 in the evening in
    the morning in the evening …", 2,000 characters and more (a review of the writes, stop 62)."""
    now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc)

    def moved(text: str, old: str, new: str) -> str:
        return redated_task(text, old, resolve_date(old, now, date_languages(old, "Italian")), new, resolve_date(new, now, date_languages(new, "Italian")))

    text = dated_task("Call the dentist tomorrow morning", "tomorrow morning", "2026-12-03")
    assert text == "Call the dentist on Thu 3 Dec 2026 in the morning"
    for _ in range(3):
        text = moved(text, "tomorrow morning", "next Friday at 5pm")
        assert text == "Call the dentist on Fri 11 Dec 2026 at 5pm"
        text = moved(text, "next Friday at 5pm", "tomorrow morning")
        assert text == "Call the dentist on Thu 3 Dec 2026 in the morning"
    # A time of day the user wrote stays, and so does a capitalised deadline word.
    assert redated_task("Call the dentist on Thu 3 Dec 2026 at 5pm", "tomorrow", "2026-12-03", "next Friday", "2026-12-11") == "Call the dentist on Fri 11 Dec 2026 at 5pm"
    by_friday = dated_task("by Friday submit the report", "Friday", "2026-12-04")
    assert redated_task(by_friday, "Friday", "2026-12-04", "Monday", "2026-12-07") == "By Mon 7 Dec 2026 submit the report"
    text = dated_task("Chiamare il dentista domani", "domani", "2026-12-03")
    for _ in range(3):
        text = moved(text, "domani", "next Friday")
        assert text == "Chiamare il dentista on Fri 11 Dec 2026"
        text = moved(text, "next Friday", "domani")
        assert text == "Chiamare il dentista domani (Thu 3 Dec 2026)"


def test_a_fact_gets_the_date_beside_its_relative_words_but_a_habit_does_not():
    assert dated("Has an exam next Tuesday", WEDNESDAY) == "Has an exam next Tuesday (2026-12-01)"
    assert dated("Swims on Friday", WEDNESDAY) == "Swims on Friday"
    assert dated("Has an exam next Tuesday (2026-12-01)", WEDNESDAY) == "Has an exam next Tuesday (2026-12-01)"


def test_a_due_date_is_shown_as_the_date_it_meant_as_people_read_it():
    assert due_phrase("next Tuesday", "2026-12-01") == "Tue 1 Dec 2026"
    assert due_phrase("2026-12-01", "2026-12-01") == "Tue 1 Dec 2026"
    assert due_phrase("next week", "2026-W49") == "the week of Mon 30 Nov 2026"
    assert due_phrase("next month", "2026-12") == "December 2026"
    assert due_phrase("someday", None) == "someday"
    tasks = [{"id": "t1", "description": "book the dentist", "status": "open", "due": "next Tuesday", "due_date": "2026-12-01"}]
    assert "- [t1] book the dentist (open, due Tue 1 Dec 2026)" in render_user_context({"tasks": tasks})


async def test_the_offline_model_stores_the_dates_the_words_meant_when_said():
    offline = load_chat_model("offline")
    for said, words, meant in (
        ("Remind me to book the dentist next Tuesday.", "next Tuesday", "2026-12-01"),
        ("Remind me tomorrow to call mom.", "tomorrow", "2026-11-26"),
        ("Remind me to renew my passport next month.", "next month", "2026-12"),
    ):
        (task,) = (await extract(offline, said, "OK.", {}, said_at=WEDNESDAY)).value.task_updates
        assert (task.due, task.due_date) == (words, meant), said


async def test_a_models_relative_due_words_are_resolved_and_its_own_date_guess_is_not_kept():
    answer = {
        "task_updates": [
            {"action": "add", "description": "Book the dentist", "due": "next Tuesday", "due_date": "2025-01-01"},
            {"action": "add", "description": "Call mom", "due": "tomorrow"},
            {"action": "add", "description": "Water the plants"},
        ],
        "new_facts": [{"text": "Has a job interview next month"}],
    }
    model = ScriptedChatModel(responder=lambda kind, messages: answer)
    said = "Book the dentist next Tuesday, call mom tomorrow, water the plants. My job interview is next month."
    result = (await extract(model, said, "OK.", {}, said_at=WEDNESDAY)).value
    assert [(t.due, t.due_date) for t in result.task_updates] == [("next Tuesday", "2026-12-01"), ("tomorrow", "2026-11-26"), (None, None)]
    assert "Has a job interview next month (2026-12)" in [f.text for f in result.new_facts]


def test_the_extraction_schema_the_model_sees_has_no_due_date():
    from core.schemas import ExtractionResult

    assert "due_date" not in str(ExtractionResult.model_json_schema())
