"""Dates people mean: "next Friday" on a Thursday is next week's, "the 1st" the next first of a month,
a task's text carries the date it took; and preferences said in other words are kept, under every model."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from core.dates import dated_task, due_phrase, human_date, resolve_date
from llm.chat_model import load_chat_model
from memory.extractor import extract
from offline_model.rule_extraction import extract_with_rules
from tests.support.scripted_model import ScriptedChatModel, empty_extraction

THURSDAY = datetime(2026, 11, 26, 10, 0, tzinfo=timezone.utc)  # Thursday 26 November 2026


@pytest.mark.parametrize(
    "words, meant",
    [
        ("next Friday", "2026-12-04"),  # the Friday of next week, 8 days on: not tomorrow
        ("next Thursday", "2026-12-03"),
        ("next Monday", "2026-11-30"),
        ("next Sunday", "2026-12-06"),
        ("Friday", "2026-11-27"),  # a bare, "on" or "this" weekday is the coming one
        ("on Friday", "2026-11-27"),
        ("this Friday", "2026-11-27"),
    ],
)
def test_next_weekday_said_on_a_thursday_is_that_day_of_next_week(words, meant):
    assert resolve_date(words, THURSDAY) == meant


def test_next_weekday_said_on_a_sunday_is_the_coming_week():
    sunday = datetime(2026, 11, 29, 18, tzinfo=timezone.utc)
    assert resolve_date("next Monday", sunday) == "2026-11-30"
    assert resolve_date("next Friday", sunday) == "2026-12-04"


@pytest.mark.parametrize(
    "words, said_at, meant",
    [
        ("the 1st", THURSDAY, "2026-12-01"),
        ("on the 1st", THURSDAY, "2026-12-01"),
        ("the 26th", THURSDAY, "2026-11-26"),  # today is still to come
        ("the 15th", THURSDAY, "2026-12-15"),
        ("the 31st", THURSDAY, "2026-12-31"),  # November has no 31st
        ("the 30th", datetime(2027, 1, 31, tzinfo=timezone.utc), "2027-03-30"),  # nor February a 30th
        ("the 1st of next month", datetime(2026, 11, 1, tzinfo=timezone.utc), "2026-12-01"),
        ("the 3rd of December", THURSDAY, "2026-12-03"),
    ],
)
def test_the_nth_is_the_next_day_of_a_month_with_that_number(words, said_at, meant):
    assert resolve_date(words, said_at) == meant


def test_a_resolved_date_reads_as_people_write_it():
    assert human_date("2026-12-04") == "Fri 4 Dec 2026"
    assert human_date("2026-W49") == "the week of Mon 30 Nov 2026"
    assert human_date("2026-12") == "December 2026"
    assert human_date("2027") == "2027"
    assert due_phrase("next Friday", "2026-12-04") == "Fri 4 Dec 2026"


@pytest.mark.parametrize(
    "text, due, meant",
    [
        ("call the dentist next Friday", "next Friday", "Call the dentist on Fri 4 Dec 2026"),
        ("pay rent on the 1st", "the 1st", "Pay rent on Tue 1 Dec 2026"),
        ("finish the report by Friday", "Friday", "Finish the report by Fri 27 Nov 2026"),
        ("Renew passport", "next month", "Renew passport in December 2026"),  # a model's text without the words
        ("call mom tomorrow morning", "tomorrow morning", "Call mom on Fri 27 Nov 2026 in the morning"),
        ("call mom at 5pm", "5pm", "Call mom on Thu 26 Nov 2026 at 5pm"),
        ("file taxes by the end of the month", "the end of the month", "File taxes by the end of November 2026"),
        ("plan the trip next week", "next week", "Plan the trip in the week of Mon 30 Nov 2026"),
    ],
)
def test_a_tasks_text_carries_the_date_its_words_meant_not_the_relative_words(text, due, meant):
    assert dated_task(text, due, resolve_date(due, THURSDAY)) == meant


def test_a_tasks_text_is_dated_once_and_words_of_another_language_keep_their_place():
    once = dated_task("call the dentist next Friday", "next Friday", "2026-12-04")
    assert dated_task(once, "next Friday", "2026-12-04") == once
    assert dated_task("chiamare la mamma domani", "domani", "2026-11-27") == "chiamare la mamma domani (Fri 27 Nov 2026)"
    assert dated_task("water the plants", None, None) == "water the plants"


async def test_remind_me_next_friday_on_a_thursday_is_stored_with_the_friday_of_next_week_in_its_text():
    said = "Remind me to call the dentist next Friday."
    (task,) = (await extract(load_chat_model("offline"), said, "OK.", {}, said_at=THURSDAY)).value.task_updates
    assert (task.description, task.due, task.due_date) == ("Call the dentist on Fri 4 Dec 2026", "next Friday", "2026-12-04")


async def test_a_models_task_gets_the_resolved_date_in_its_text_too():
    answer = {**empty_extraction(), "task_updates": [{"action": "add", "description": "Call the dentist", "due": "next Friday"}]}
    model = ScriptedChatModel(responder=lambda kind, messages: answer)
    result = (await extract(model, "Remind me to call the dentist next Friday.", "Sure.", {}, said_at=THURSDAY)).value
    assert [(t.description, t.due_date) for t in result.task_updates] == [("Call the dentist on Fri 4 Dec 2026", "2026-12-04")]


async def test_pay_rent_on_the_1st_gets_the_next_first_of_a_month_as_its_due_date():
    (task,) = (await extract(load_chat_model("offline"), "Remind me to pay rent on the 1st.", "OK.", {}, said_at=THURSDAY)).value.task_updates
    assert (task.description, task.due, task.due_date) == ("Pay rent on Tue 1 Dec 2026", "the 1st", "2026-12-01")


def test_the_1st_that_names_no_day_is_no_due_date():
    (task,) = extract_with_rules("I need to finish the 1st draft.").task_updates
    assert task.due is None


PREFERENCES_IN_OTHER_WORDS = [
    ("I'd like answers without emojis.", {"other_notes": ["No emojis"]}),
    ("without emojis", {"other_notes": ["No emojis"]}),
    ("No emojis please.", {"other_notes": ["No emojis"]}),
    ("Could you stop using emojis?", {"other_notes": ["No emojis"]}),
    ("I hate emojis.", {"other_notes": ["No emojis"]}),
    ("Short replies please.", {"answer_length": "short"}),
    ("Please keep it brief.", {"answer_length": "short"}),
    ("Answer briefly.", {"answer_length": "short"}),
    ("Can you keep your answers short?", {"answer_length": "short"}),
    ("No bullet points please.", {"prefers_bullets": False}),
    ("Please use bullet points.", {"prefers_bullets": True}),
    ("Be more formal, please.", {"tone": "formal"}),
    ("No bullet points, but detailed answers please.", {"answer_length": "long", "prefers_bullets": False}),
    ("Reply without emojis and keep it short.", {"answer_length": "short", "other_notes": ["No emojis"]}),
]


@pytest.mark.parametrize("said, kept", PREFERENCES_IN_OTHER_WORDS)
def test_the_rules_keep_a_preference_said_in_other_words(said, kept):
    assert extract_with_rules(said).new_preferences.model_dump(exclude_defaults=True) == kept


def _model_answering(answer) -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda kind, messages: answer)


@pytest.mark.parametrize("said, kept", PREFERENCES_IN_OTHER_WORDS)
@pytest.mark.parametrize(
    "model",
    [
        pytest.param(lambda: load_chat_model("offline"), id="offline"),
        pytest.param(lambda: _model_answering(empty_extraction()), id="model-that-saw-nothing"),
        pytest.param(lambda: _model_answering({"new_preferences": {"answer_length": "medium"}}), id="model-that-invents"),
        pytest.param(lambda: _model_answering("not JSON at all"), id="model-without-valid-output"),
    ],
)
async def test_a_preference_said_in_other_words_is_kept_under_every_model(model, said, kept):
    result = (await extract(model(), said, "OK.", {}, said_at=THURSDAY)).value
    assert result.new_preferences.model_dump(exclude_defaults=True) == kept


@pytest.mark.parametrize(
    "said",
    [
        "Could you give me a short summary of this article?",  # one answer, not answers from now on
        "Can you explain it briefly?",
        "Give me a detailed explanation of TCP.",
        "Please help me with my code.",
        "Reply to this email in Italian.",
        "Write me a detailed report please.",
        "Tell me a long story please.",
        "Do you always use bullet points?",
    ],
)
def test_a_request_about_one_answer_is_not_a_preference(said):
    assert extract_with_rules(said).new_preferences.model_dump(exclude_defaults=True) == {}
