"""Only shape slips with a single reading are fixed; anything else is left for validation to refuse."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llm.shape_repair import coerce_shapes, kept_valid_parts
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard


def test_facts_given_as_strings_become_fact_objects_and_a_wrong_case_literal_is_fixed():
    data = {"new_facts": ["Lives in Haifa", {"text": "Has a dog", "importance": "HIGH"}], "task_updates": None}
    result = ExtractionResult.model_validate(coerce_shapes(data, ExtractionResult))
    assert [(f.text, f.importance) for f in result.new_facts] == [("Lives in Haifa", "medium"), ("Has a dog", "high")]
    assert result.task_updates == []


def test_a_single_item_becomes_a_list_and_a_one_string_object_in_a_string_list_becomes_the_string():
    data = {"summary": "Trip talk.", "key_facts": {"fact": "Flight on May 3"}, "topics": "travel"}
    board = SummaryBoard.model_validate(coerce_shapes(data, SummaryBoard))
    assert board.key_facts == ["Flight on May 3"] and board.topics == ["travel"]


def test_the_object_wrapped_in_the_schema_name_is_unwrapped():
    assert ChatTitle.model_validate(coerce_shapes({"ChatTitle": {"title": "Rome"}}, ChatTitle)).title == "Rome"


@pytest.mark.parametrize(
    ("schema", "data"),
    [
        (ChatTitle, {"title": ["Rome", "Trip"]}),  # which of the two?
        (ExtractionResult, {"new_facts": [{"fact": "x", "note": "y"}]}),  # which key is the text?
        (ExtractionResult, {"task_updates": ["call mom"]}),  # a task needs an action too: no single reading
    ],
)
def test_ambiguous_shapes_are_left_alone_and_still_fail(schema, data):
    with pytest.raises(ValidationError):
        schema.model_validate(coerce_shapes(data, schema))


def test_the_input_is_not_changed():
    data = {"new_facts": ["Lives in Haifa"]}
    coerce_shapes(data, ExtractionResult)
    assert data == {"new_facts": ["Lives in Haifa"]}


def test_the_valid_parts_are_kept_when_an_unknown_key_or_one_bad_item_spoils_the_whole():
    data = {"new_facts": [{"text": "Plays the cello"}, {"text": "bad\u0000"}, {"importance": "high"}], "profile_updates": {"instrument": "cello", "name": "Bob"}}
    kept, dropped = kept_valid_parts(data, ExtractionResult)
    assert [f.text for f in kept.new_facts] == ["Plays the cello"] and kept.profile_updates.name == "Bob"
    assert any("instrument" in d for d in dropped) and len(dropped) == 3
    assert data["profile_updates"]["instrument"] == "cello"  # the input is not changed
    # Nothing of use left: None, as when nothing was valid.
    assert kept_valid_parts({"profile_updates": {"instrument": "cello"}}, ExtractionResult)[0] is None
    assert kept_valid_parts(["not", "an", "object"], ExtractionResult)[0] is None
