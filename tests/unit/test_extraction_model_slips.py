"""What small models get wrong in an extraction does not become memory: a copied prompt example, a placeholder value."""

from __future__ import annotations

import pytest

from memory.extractor import EXAMPLE_FACTS, extract
from core.schemas import ExtractionResult
from tests.support.scripted_model import ScriptedChatModel


def model_answering(answer: dict) -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda kind, messages: answer)


def facts(*texts: str) -> dict:
    return {"new_facts": [{"text": t} for t in texts]}


def test_the_examples_are_read_from_the_prompt_and_the_schema():
    assert "Lives in Haifa" in EXAMPLE_FACTS and "Has a dog named Rex" in EXAMPLE_FACTS


async def test_an_example_fact_the_user_never_spoke_of_is_dropped_and_the_real_one_kept():
    # What Qwen2.5-Coder-1.5B answered for "I have a jeep" in function-calling mode.
    result = await extract(model_answering(facts("Lives in Haifa", "Has a jeep")), "I have a jeep", "Nice!", {})
    assert [f.text for f in result.value.new_facts] == ["Has a jeep"]


async def test_an_example_fact_the_user_did_state_is_kept():
    said = "I live in haifa with my dog Rex."
    result = await extract(model_answering(facts("Lives in Haifa", "Has a dog named Rex")), said, "Hi!", {})
    assert [f.text for f in result.value.new_facts] == ["Lives in Haifa", "Has a dog named Rex"]


async def test_placeholder_profile_values_leave_the_fields_unchanged():
    # The 1.5B filled every profile field of an MSC speaker who had stated none: "location": "unknown".
    answer = {
        "profile_updates": {"name": "Dana", "location": "unknown", "level": "Not specified", "role": "role", "goals": ["N/A", "run a marathon"]},
        "new_preferences": {"tone": "none", "language": "Italian"},
    }  # fmt: skip
    result = await extract(model_answering(answer), "I'm Dana, I want to run a marathon. Reply in Italian.", "Ciao!", {})
    profile, preferences = result.value.profile_updates, result.value.new_preferences
    assert (profile.name, profile.location, profile.level, profile.role, profile.goals) == ("Dana", None, None, None, ["run a marathon"])
    assert (preferences.tone, preferences.language) == (None, "Italian")


def test_a_real_value_that_contains_a_placeholder_word_is_kept():
    result = ExtractionResult.model_validate({"profile_updates": {"location": "Unknown Mortal Orchestra's home town", "role": "none-profit founder"}})
    assert result.profile_updates.location == "Unknown Mortal Orchestra's home town"
    assert result.profile_updates.role == "none-profit founder"


async def test_profile_values_the_user_never_stated_are_dropped():
    # What the 1.5B answered for an MSC speaker who said only this: every profile field filled.
    answer = {
        "profile_updates": {"name": "bot_0", "location": "Haifa", "role": "assistant", "level": "intermediate",
                            "native_language": "english", "goals": ["to be a helpful assistant"]},
    }  # fmt: skip
    result = await extract(model_answering(answer), "What kind of car do you own? I have a jeep.", "A Subaru.", {})
    assert result.value.profile_updates.model_dump(exclude_defaults=True) == {}


async def test_stated_profile_values_are_kept_in_any_language_or_form():
    answer = {
        "profile_updates": {"name": "Dana", "location": "Tel Aviv", "role": "nurse", "level": "A2",
                            "native_language": "Italian", "goals": ["learn Hebrew", "become a surgeon"]},
    }  # fmt: skip
    said = "Sono Dana, italiana. I work as a nurse in tel-aviv, my Hebrew is A2 and I want to learn hebrew properly."
    profile = (await extract(model_answering(answer), said, "Shalom!", {})).value.profile_updates
    assert (profile.name, profile.location, profile.role, profile.level, profile.native_language) == ("Dana", "Tel Aviv", "nurse", "A2", "Italian")
    assert profile.goals == ["learn Hebrew"]  # the surgeon was never mentioned


async def test_a_hebrew_place_with_a_prefix_letter_is_stated():
    answer = {"profile_updates": {"location": "חיפה"}}
    result = await extract(model_answering(answer), "שלום! אני גר בחיפה", "נעים מאוד", {})
    assert result.value.profile_updates.location == "חיפה"


async def test_a_stored_value_sent_again_is_dropped_without_a_warning(caplog):
    # The 1.5B repeats the stored profile in every extraction; only invented values are worth a warning.
    answer = {"profile_updates": {"name": "Dana", "location": "Haifa", "role": "nurse"}}
    stored = {"profile": {"name": "Dana", "location": "Haifa"}}
    result = await extract(model_answering(answer), "I work as a nurse at Rambam hospital.", "Great!", stored)
    assert result.value.profile_updates.model_dump(exclude_defaults=True) == {"role": "nurse"}
    assert "did not state" not in caplog.text


def test_the_extraction_prompt_carries_the_users_message_whole_and_only_the_head_of_a_long_reply():
    import prompts
    from memory.extractor import REPLY_CONTEXT_CHARS, build_extraction_messages

    said = "I live in Haifa. " * 60
    system, body = build_extraction_messages(said, "Haifa is a port city. " * 200, {})
    assert system.content == prompts.text("extraction")  # the same every turn: a prompt cache reuses it
    assert prompts.between(body.content, prompts.USER_MESSAGE_TAG) == said.strip() or said in body.content
    reply = prompts.between(body.content, prompts.ASSISTANT_REPLY_TAG)
    assert reply.endswith(" …") and len(reply) <= REPLY_CONTEXT_CHARS + 2


async def test_a_fact_from_the_assistants_reply_or_from_nowhere_is_dropped_and_a_paraphrase_kept():
    # What the 0.5B answered, with the worked example in the prompt, for a line of MSC small talk.
    answer = facts("Does not own a car", "Is not very active", "Enjoys exercising at the gym")
    result = await extract(model_answering(answer), "Ah I see! I like going to the gym to work out.", "I don't own a car.", {})
    # The rules' own fact for the sentence follows the model's.
    assert [f.text for f in result.value.new_facts] == ["Enjoys exercising at the gym", "Likes going to the gym to work out"]


async def test_a_copy_of_the_worked_examples_fact_without_a_name_is_dropped_unless_the_user_said_it():
    assert "Goes running" in EXAMPLE_FACTS
    copied = await extract(model_answering(facts("Goes running", "Likes tea")), "I like tea in the morning.", "Nice!", {})
    # (the model's "Likes tea" gives way to the rules' more specific wording of it)
    assert [f.text for f in copied.value.new_facts] == ["Likes tea in the morning"]
    said = await extract(model_answering(facts("Goes running")), "I go running every day.", "Nice!", {})
    assert [f.text for f in said.value.new_facts] == ["Goes running"]


async def test_a_feeling_verb_or_a_question_is_not_enough_to_make_a_fact_the_users():
    # The 0.5B on "That's nice! I really love poached eggs!" (the MSC speaker never spoke of cooking).
    answer = facts("I love to cook healthy food", "Do you like movies?", "Loves poached eggs")
    result = await extract(model_answering(answer), "That's nice! I really love poached eggs! Do you like movies?", "I cook.", {})
    assert [f.text for f in result.value.new_facts] == ["Loves poached eggs"]


async def test_a_profile_value_only_part_of_which_the_user_said_is_dropped():
    # The 0.5B's roles for MSC small talk: "web user", "car owner", "music lover".
    answer = {"profile_updates": {"role": "web user", "location": "New York"}}
    said = "I love to browse the web for deals, here in New York."
    profile = (await extract(model_answering(answer), said, "Nice.", {})).value.profile_updates
    assert (profile.role, profile.location) == (None, "New York")


async def test_a_role_is_taken_only_from_a_sentence_about_the_user_themselves():
    # Both models on an MSC line: the father's job became the user's role.
    answer = {"profile_updates": {"role": "farmer"}}
    father = await extract(model_answering(answer), "My father was a farmer when I was a boy.", "Lovely.", {})
    assert father.value.profile_updates.role is None
    own = await extract(model_answering(answer), "I work on my farm, I'm a farmer like my father.", "Lovely.", {})
    assert own.value.profile_updates.role == "farmer"


async def test_a_value_is_stated_by_the_start_of_a_word_not_by_letters_inside_one():
    # The 0.5B gave the worked example's "Porto" for "Do you play any sports?": "port" is inside "sports".
    answer = {"profile_updates": {"location": "Porto"}, "new_preferences": {"tone": "formal"}}
    result = (await extract(model_answering(answer), "Do you play any sports? I'm in shape, I guess.", "I run.", {})).value
    assert result.profile_updates.location is None and result.new_preferences.tone is None


# What the 0.5B wrote on MSC small talk: (what the user said, the reply, the model's facts, the facts kept).
UNCARRIED_FACTS = [
    pytest.param(  # one word of the message ("trumpet", "work") carried a made-up or a stored fact
        "I play the trumpet. I really enjoy it. It makes time go by in school faster, I work hard.", "Cool!",
        ["Teaches trumpet in Porto", "Likes going to the gym to work out", "Plays the trumpet in school"],
        ["Plays the trumpet in school"], id="most-of-its-words-unsaid"),
    pytest.param(  # the other speaker's words taken for the user's: "veggies" and "marketing" are only in the reply
        "I love to grill! I love steak. What do you do for work?", "I work in marketing. I like some grilled veggies.",
        ["Grilled veggies", "I work in marketing", "Loves steak"], ["Loves steak", "Loves to grill"], id="words-from-the-reply"),
    pytest.param(  # the prompt's example city and a band nobody named, each beside a word of the message
        "I have lived here all my life. I just moved -- to charlotte, nc. My favorite band plays tonight.", "Nice!",
        ["Has lived in Haifa", "Favorite band: The Beatles", "Moved to Charlotte, NC"], ["Moved to Charlotte, NC"],
        id="names-only-what-the-user-did-not"),
    pytest.param(  # asking is not saying: "Does music" for "Do you like music?"
        "Do you like music? I play the guitar.", "I do!", ["Does music", "Plays the guitar"], ["Plays the guitar"], id="read-from-a-question"),
    pytest.param(  # "Does not like movies" for "I prefer to watch the sunset over a movie"
        "I prefer to watch the sunset over a movie.", "Me too.", ["Does not like movies", "Prefers watching the sunset"],
        ["Prefers watching the sunset"], id="a-not-the-user-never-said"),
]


@pytest.mark.parametrize(("said", "reply", "answer", "kept"), UNCARRIED_FACTS)
async def test_a_model_fact_the_users_own_words_of_the_turn_do_not_carry_is_dropped(said, reply, answer, kept):
    result = await extract(model_answering(facts(*answer)), said, reply, {})
    assert [f.text for f in result.value.new_facts] == kept


async def test_a_fact_about_a_number_the_user_said_is_kept_though_its_other_words_are_the_models():
    result = await extract(model_answering(facts("Is 31 years old")), "Today is my birthday, I turned 31!", "Happy birthday!", {})
    assert [f.text for f in result.value.new_facts] == ["Is 31 years old"]
