"""Blank values (core.text_validation.is_blank): a text that shows nothing — empty, spaces, or only
invisible characters (format characters, Hangul fillers) — is never a value, whoever sends it: a
message of it is empty, a memory value of it is refused (HTTP bodies, stored models) or left out
(what a model extracts), and null is how a field is cleared (docs/api.md, "Blank values")."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.http.schemas import FactPatch, TaskPatch
from core.errors import InvalidMessage
from core.schemas import (
    ExtractionResult, Fact, NewFact, PreferenceUpdates, PreferencesPatch, ProfilePatch, ProfileUpdates, Task, TaskUpdate, UserDocument,
)
from core.text_validation import validate_user_text

SPACES = ["", " ", "   \n\t ", "\u00a0\u3000"]
INVISIBLE = [
    "\u200b\u2060",  # zero-width space, word joiner
    "\ufeff",  # BOM
    "\u00ad",  # soft hyphen
    "\u202e\u2066",  # bidi controls
    "\u200d\u200c",  # zero-width joiner and non-joiner
    "\u3164", "\u115f\u1160", "\uffa0",  # Hangul fillers
    " \u200b\n\ufeff ",  # a mix with spaces
]
BLANK = SPACES + INVISIBLE
VISIBLE = ["a", "\u200bDana", "co\u00adoperate", "\ufeffhello", "👍", "\u0301", "ㄱ\u3164"]


def test_is_blank_means_nothing_visible():
    from core.text_validation import is_blank

    assert all(is_blank(t) for t in BLANK), [t for t in BLANK if not is_blank(t)]
    assert not any(is_blank(t) for t in VISIBLE), [t for t in VISIBLE if is_blank(t)]


@pytest.mark.parametrize("text", INVISIBLE, ids=ascii)
def test_a_message_of_invisible_characters_is_empty_like_one_of_spaces(text):
    with pytest.raises(InvalidMessage, match="^The message is empty"):
        validate_user_text(text)


def test_a_message_with_something_visible_is_kept_exactly():
    for text in VISIBLE:
        assert validate_user_text(text) == text


def blank_errors(model, body: dict) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return [".".join(map(str, e["loc"])) for e in caught.value.errors() if e["type"] == "blank_text"]


@pytest.mark.parametrize("blank", BLANK, ids=ascii)
def test_patch_bodies_refuse_a_blank_field_or_list_item(blank):
    assert blank_errors(ProfilePatch, {"name": blank, "location": "Haifa", "goals": ["ski", blank]}) == ["name", "goals.1"]
    assert blank_errors(PreferencesPatch, {"tone": blank, "language": blank, "other_notes": [blank]}) == ["language", "tone", "other_notes.0"]
    assert blank_errors(TaskPatch, {"due": blank, "description": blank}) == ["description", "due"]
    assert blank_errors(FactPatch, {"text": blank}) == ["text"]


def test_null_clears_and_visible_text_is_kept_as_sent():
    patch = ProfilePatch.model_validate({"name": None, "goals": None, "location": "\u200bHaifa"})
    assert patch.model_fields_set == {"name", "goals", "location"} and patch.name is None and patch.location == "\u200bHaifa"
    assert TaskPatch.model_validate({"due": None}).due is None


def test_the_stored_models_refuse_a_blank_value_but_read_one_already_stored():
    with pytest.raises(ValidationError):
        Task(id="t1", description="Renew my passport", due="  ")
    with pytest.raises(ValidationError):
        Task(id="t1", description="\u200b")
    with pytest.raises(ValidationError):
        Fact(id="f1", text="\u00ad")
    # What is stored was checked on its way in; one written before the rule stays readable.
    doc = UserDocument.model_validate({"profile": {"name": "   ", "goals": [""]}, "preferences": {"tone": "\ufeff"}})
    assert doc.profile.name == "   " and doc.preferences.tone == "\ufeff"


@pytest.mark.parametrize("blank", ["  ", *INVISIBLE], ids=ascii)
def test_a_blank_value_a_model_extracts_is_left_out_like_unknown(blank):
    profile = ProfileUpdates.model_validate({"name": blank, "location": "Haifa", "goals": [blank, "learn Italian"]})
    assert profile.name is None and profile.location == "Haifa" and profile.goals == ["learn Italian"]
    prefs = PreferenceUpdates.model_validate({"tone": blank, "other_notes": [blank]})
    assert prefs.tone is None and prefs.other_notes == []
    assert TaskUpdate(action="add", description="Renew my passport", due=blank).due is None


def test_a_model_that_extracts_a_blank_fact_or_new_task_is_refused_so_it_is_asked_again():
    with pytest.raises(ValidationError, match="fact text is empty"):
        NewFact(text="\u200b\u2060")
    with pytest.raises(ValidationError, match="new task's description is empty"):
        ExtractionResult.model_validate({"task_updates": [{"action": "add", "description": "\u3164"}]})
    # An update or completion may name its task by id alone.
    assert TaskUpdate(action="complete", description="", task_id="t1").task_id == "t1"


def test_an_export_message_that_shows_nothing_is_left_out_as_an_empty_one_is():
    from memory.import_formats import export_histories

    exports = Path(__file__).resolve().parents[1] / "fixtures" / "exports"
    conversation = copy.deepcopy(json.loads((exports / "claude_conversations.json").read_text())[0])
    before = len(export_histories([conversation])[0]["messages"])
    blank = copy.deepcopy(conversation["chat_messages"][0])
    blank["uuid"], blank["text"] = "0c1d2e3f-1111-4000-8000-0000000000ff", "\u200b\ufeff"
    blank["content"] = [{**blank["content"][0], "text": "\u200b\ufeff"}]
    conversation["chat_messages"].insert(1, blank)
    assert len(export_histories([conversation])[0]["messages"]) == before
