"""A small model that copies the extraction prompt's example facts does not teach the memory a false fact."""

from __future__ import annotations

from memory.extractor import EXAMPLE_FACTS, extract
from tests.support.scripted_model import ScriptedChatModel


def model_answering(facts: list[str]) -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda kind, messages: {"new_facts": [{"text": t} for t in facts]})


def test_the_examples_are_read_from_the_prompt_and_the_schema():
    assert "Lives in Haifa" in EXAMPLE_FACTS and "Has a dog named Rex" in EXAMPLE_FACTS


async def test_an_example_fact_the_user_never_spoke_of_is_dropped_and_the_real_one_kept():
    # What Qwen2.5-Coder-1.5B answered for "I have a jeep" in function-calling mode.
    result = await extract(model_answering(["Lives in Haifa", "Has a jeep"]), "I have a jeep", "Nice!", {})
    assert [f.text for f in result.value.new_facts] == ["Has a jeep"]


async def test_an_example_fact_the_user_did_state_is_kept():
    result = await extract(model_answering(["Lives in Haifa", "Has a dog named Rex"]), "I live in Haifa with my dog Rex.", "Hi!", {})
    assert [f.text for f in result.value.new_facts] == ["Lives in Haifa", "Has a dog named Rex"]
