"""The rules are a floor under every model: merged with the model's extraction, never lost to it.

memory.extractor.extract runs the deterministic rules whatever the model; the model's clear values
win for the same slot, its invented ones do not displace what the rules read in the user's words.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from core.errors import ModelOutputError
from core.schemas import ExtractionResult
from llm.chat_model import load_chat_model
from memory.extractor import RULES_ONLY, extract
from tests.support.scripted_model import ScriptedChatModel

MAYA = "Hi! I'm Maya, a backend developer in Lisbon. I prefer short answers with Python examples."
WEDNESDAY = datetime(2026, 11, 25, 9, 30, tzinfo=timezone.utc)


def model_answering(answer) -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda kind, messages: answer)


class ProviderDown(ConnectionError):
    pass


def failing_model() -> ScriptedChatModel:
    def respond(kind, messages):
        raise ProviderDown("the provider is unreachable")

    return ScriptedChatModel(responder=respond)


def memories(result: ExtractionResult) -> dict:
    return result.model_dump(exclude_defaults=True)


def assert_maya(result: ExtractionResult) -> None:
    profile, prefs = result.profile_updates, result.new_preferences
    assert (profile.name, profile.role, profile.location) == ("Maya", "backend developer", "Lisbon")
    assert prefs.answer_length == "short" and prefs.code_examples is True
    assert prefs.other_notes == ["Prefers code examples in Python"]
    assert [f.text for f in result.new_facts] == ["Works as a backend developer", "Lives in Lisbon"]


async def test_a_model_that_returns_nothing_valid_loses_nothing_the_rules_found():
    result = await extract(model_answering("I am not sure what you mean."), MAYA, "Hi Maya!", {})
    assert result.method == RULES_ONLY and "invalid twice" in result.errors[-1]
    assert_maya(result.value)


async def test_a_model_whose_provider_fails_loses_nothing_the_rules_found():
    result = await extract(failing_model(), MAYA, "Hi Maya!", {})
    assert result.method == RULES_ONLY and "ProviderDown" in result.errors[-1]
    assert_maya(result.value)


async def test_a_failing_model_still_raises_when_the_rules_found_nothing_either():
    with pytest.raises(ModelOutputError):
        await extract(model_answering("no JSON here"), "The cello sounds lovely.", "It does!", {})
    with pytest.raises(ProviderDown):
        await extract(failing_model(), "The cello sounds lovely.", "It does!", {})


async def test_a_fault_of_the_rules_does_not_cost_the_turn_the_models_extraction(monkeypatch):
    import memory.extractor as extractor

    def broken(user_message, stored=None):
        raise RuntimeError("a rule's fault")

    monkeypatch.setattr(extractor, "extract_with_rules", broken)
    result = await extract(model_answering({"new_facts": [{"text": "Plays the cello"}]}), "I play the cello.", "Nice!", {})
    assert [f.text for f in result.value.new_facts] == ["Plays the cello"]


async def test_a_model_that_agrees_with_the_rules_adds_no_duplicates():
    answer = {
        "profile_updates": {"name": "Maya", "role": "backend developer", "location": "Lisbon"},
        "new_preferences": {"answer_length": "short", "code_examples": True, "other_notes": ["prefers code examples in Python"]},
        "new_facts": [{"text": "Works as a backend developer"}, {"text": "Lives in Lisbon, Portugal"}],
    }  # fmt: skip
    result = (await extract(model_answering(answer), MAYA, "Hi Maya!", {})).value
    assert [f.text for f in result.new_facts] == ["Works as a backend developer", "Lives in Lisbon, Portugal"]
    assert result.new_preferences.other_notes == ["prefers code examples in Python"]
    assert (result.profile_updates.name, result.profile_updates.location) == ("Maya", "Lisbon")


async def test_a_goal_the_model_writes_in_the_users_first_person_is_kept_once_in_the_third():
    # The rules write "improve their endurance"; a model copying "my" would have made it two goals.
    answer = {"profile_updates": {"goals": ["improve my endurance"]}}
    result = (await extract(model_answering(answer), "I want to improve my endurance.", "Good plan.", {})).value
    assert result.profile_updates.goals == ["improve their endurance"]


async def test_the_same_task_in_the_models_words_is_added_once_with_the_rules_due_date():
    answer = {"task_updates": [{"action": "add", "description": "Renew passport"}]}
    said = "Remind me to renew my passport next month."
    result = (await extract(model_answering(answer), said, "Sure.", {}, said_at=WEDNESDAY)).value
    assert [(t.description, t.due, t.due_date) for t in result.task_updates] == [("Renew passport in December 2026", "next month", "2026-12")]


async def test_a_value_the_model_states_clearly_wins_over_the_rules_for_the_same_slot():
    # The rules read "a student in Lisbon" as where Noa lives; the model read the sentence better.
    said = "I'm a student in Lisbon, but home is Porto. I prefer short answers, long ones only for code."
    answer = {
        "profile_updates": {"location": "Porto"},
        "new_facts": [{"text": "Lives in Porto"}, {"text": "Studies in Lisbon"}],
        "new_preferences": {"answer_length": "long"},
    }
    result = (await extract(model_answering(answer), said, "Got it.", {})).value
    assert result.profile_updates.location == "Porto" and result.profile_updates.role == "student"
    assert [f.text for f in result.new_facts] == ["Lives in Porto", "Studies in Lisbon"]  # "Works as a student" is said by the second
    assert result.new_preferences.answer_length == "long"


async def test_what_a_model_invents_does_not_displace_what_the_rules_read():
    # A small model's guesses: a name and a job nobody said, the prompt's own example city, a preference not spoken of.
    answer = {
        "profile_updates": {"name": "Bob", "role": "teacher", "location": "Haifa"},
        "new_facts": [{"text": "Lives in Haifa"}, {"text": "Works as a teacher"}],
        "new_preferences": {"answer_length": "medium"},
    }
    result = (await extract(model_answering(answer), MAYA, "Hi Maya!", {})).value
    assert_maya(result)


async def test_the_maya_sentence_is_remembered_whole_with_the_offline_model():
    assert_maya((await extract(load_chat_model("offline"), MAYA, "Hi Maya!", {})).value)


async def test_the_dana_lines_are_remembered_with_the_offline_model():
    offline = load_chat_model("offline")
    lines = [
        "Hi! My name is Dana, I live in Haifa and I work as a nurse.",
        "I prefer short answers.",
        "Remind me to renew my passport next month.",
    ]
    first, second, third = [(await extract(offline, line, "OK.", {}, said_at=WEDNESDAY)).value for line in lines]
    assert (first.profile_updates.name, first.profile_updates.location, first.profile_updates.role) == ("Dana", "Haifa", "nurse")
    assert second.new_preferences.answer_length == "short"
    (task,) = third.task_updates
    assert (task.description, task.due, task.due_date) == ("Renew my passport in December 2026", "next month", "2026-12")


async def test_a_rules_fact_the_model_said_in_other_words_or_another_language_is_not_added_twice():
    answer = {"new_facts": [{"text": "Vive a Roma"}, {"text": "גר בחיפה"}]}
    said = "I live in Roma. אני גר בחיפה"
    result = (await extract(model_answering(answer), said, "Bene!", {})).value
    assert [f.text for f in result.new_facts] == ["Vive a Roma", "גר בחיפה"]
    assert result.profile_updates.location == "חיפה"  # the profile still gets the rules' value: the last one the message said


async def test_a_task_already_on_the_list_or_decided_through_a_task_tool_is_not_added_by_the_rules():
    said = "Remind me to water the plants on Friday."
    stored = {"tasks": [{"id": "t1", "description": "Water the plants", "status": "open"}]}
    assert (await extract(model_answering({}), said, "Done.", stored)).value.task_updates == []
    assert (await extract(model_answering({}), said, "OK.", {}, rule_tasks=False)).value.task_updates == []
    assert len((await extract(model_answering({}), said, "OK.", {})).value.task_updates) == 1


# --------------------------------------------------------------------------- preferences: the user's words win
async def test_a_model_preference_that_contradicts_the_users_words_loses_in_the_field_a_note_and_a_fact():
    # What the 0.5B stored for "I prefer short answers.": short from the rules, and "prefers medium answers".
    answer = {
        "new_preferences": {"answer_length": "medium", "other_notes": ["Prefers medium answers"]},
        "new_facts": [{"text": "Prefers medium-length responses"}],
    }
    result = (await extract(model_answering(answer), "I prefer short answers.", "Sure.", {})).value
    assert result.new_preferences.answer_length == "short"
    assert "medium" not in str(memories(result)), memories(result)


async def test_a_preference_the_message_does_not_speak_of_is_not_taken_from_the_model():
    # A later turn: the small model fills every preference field, though the user spoke of none.
    answer = {
        "new_preferences": {"answer_length": "medium", "language": "English", "tone": "friendly", "code_examples": True,
                            "prefers_bullets": True, "other_notes": ["Prefers detailed explanations"]},
        "task_updates": [{"action": "add", "description": "Renew passport", "due": "next month"}],
    }  # fmt: skip
    stored = {"preferences": {"answer_length": "short"}}
    result = (await extract(model_answering(answer), "Remind me to renew my passport next month.", "Done.", stored)).value
    assert result.new_preferences.model_dump(exclude_defaults=True) == {}
    assert [t.description.startswith("Renew passport in ") for t in result.task_updates] == [True]


async def test_a_preference_the_user_words_in_their_own_way_is_taken_from_the_model():
    answer = {"new_preferences": {"answer_length": "short", "language": "Italian", "code_examples": True, "prefers_bullets": True}}
    said = "Keep it brief, rispondi in italiano, with a code snippet and bullet points."
    result = (await extract(model_answering(answer), said, "Va bene.", {})).value
    prefs = result.new_preferences
    assert (prefs.answer_length, prefs.language, prefs.code_examples, prefs.prefers_bullets) == ("short", "Italian", True, True)


async def test_a_rules_fact_is_not_displaced_by_a_model_fact_that_only_shares_a_word_with_it():
    # "Teaches the trumpet" is not "Plays the trumpet"; both are kept (the model's passes the word check).
    answer = {"new_facts": [{"text": "Teaches the trumpet"}]}
    result = (await extract(model_answering(answer), "I play the trumpet, I teach it too.", "Cool!", {})).value
    assert [f.text for f in result.new_facts] == ["Teaches the trumpet", "Plays the trumpet"]


async def test_a_model_fact_that_drops_the_users_not_gives_way_to_the_rules_fact():
    answer = {"new_facts": [{"text": "Eats meat"}]}
    result = (await extract(model_answering(answer), "Oh neat! I don't eat meat.", "I love steak.", {})).value
    assert [f.text for f in result.new_facts] == ["Does not eat meat"]


async def test_a_vaguer_restatement_by_the_model_gives_way_to_the_rules_more_specific_fact():
    answer = {"new_facts": [{"text": "Loves warm pants"}]}
    said = "Haha I feel you. I love wearing warm pants in the winter."
    result = (await extract(model_answering(answer), said, "Same!", {})).value
    assert [f.text for f in result.new_facts] == ["Loves wearing warm pants in the winter"]
    # The model's more specific wording of the same thing is kept instead of the rules'.
    answer = {"new_facts": [{"text": "Loves wearing warm pants in the winter months"}]}
    result = (await extract(model_answering(answer), said, "Same!", {})).value
    assert [f.text for f in result.new_facts] == ["Loves wearing warm pants in the winter months"]


async def test_a_place_the_user_says_no_longer_holds_is_retracted_whatever_the_model_read():
    # A small model loses the "no longer" and sends the place back as where the user lives.
    answer = {"profile_updates": {"location": "Rome"}}
    result = (await extract(model_answering(answer), "I no longer live in Rome.", "Noted.", {})).value
    assert result.retracted == {"location": "Rome"} and result.profile_updates.location is None


async def test_a_retraction_only_the_model_sends_is_not_taken():
    """``retracted`` is code's, not in the schema a model is given: a model's is ignored."""
    answer = {"profile_updates": {}, "retracted": {"location": "Haifa"}}
    result = (await extract(model_answering(answer), "I love Haifa in the spring.", "Nice.", {})).value
    assert result.retracted == {}
