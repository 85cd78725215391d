"""Rule-based extraction (the offline model's extraction call): each rule, conservatively."""

from __future__ import annotations

import pytest

from offline_model.rule_extraction import extract_with_rules
from core.schemas import ExtractionResult


def fact_texts(result: ExtractionResult) -> list[str]:
    return [f.text for f in result.new_facts]


def fact(result: ExtractionResult, text: str):
    found = [f for f in result.new_facts if f.text == text]
    assert found, f"{text!r} not in {fact_texts(result)}"
    return found[0]


# --------------------------------------------------------------------------- name
@pytest.mark.parametrize(
    "message, name",
    [
        ("My name is Dana.", "Dana"),
        ("my name is Dana Cohen, nice to meet you", "Dana Cohen"),
        ("My name is Dana and I live in Haifa.", "Dana"),
        ("I'm called Yossi.", "Yossi"),
        ("Call me Dani!", "Dani"),
        ("Hi, I'm Dana.", "Dana"),
        ("Mi chiamo Giulia.", "Giulia"),
        ("קוראים לי דנה.", "דנה"),
    ],
)
def test_name_rules_set_profile_name(message, name):
    assert extract_with_rules(message).profile_updates.name == name


def test_name_of_an_all_lowercase_message_is_capitalized():
    assert extract_with_rules("my name is dana").profile_updates.name == "Dana"


def test_call_me_with_a_lowercase_word_is_not_a_name():
    assert extract_with_rules("Call me tomorrow please.").profile_updates.name is None


@pytest.mark.parametrize(
    "message, name",
    [
        ("Don't call me Bob.", None),
        ("Never call me Bob.", None),
        ("Please don't call me Bob, I'm Robert.", None),
        ("My name is Dana, but my friends call me Dani.", "Dana"),
        ("I'm Daniel but you can call me Dani.", "Dani"),
        ("Please don't call me Bob. Call me Robert.", "Robert"),
    ],
)
def test_call_me_names_the_user_only_when_they_ask_for_it(message, name):
    assert extract_with_rules(message).profile_updates.name == name


def test_my_name_is_never_becomes_a_fact():
    assert extract_with_rules("My name is Dana.").new_facts == []


# --------------------------------------------------------------------------- location and role
@pytest.mark.parametrize(
    ("message", "field", "value", "fact_text"),
    [
        pytest.param("I live in Haifa.", "location", "Haifa", "Lives in Haifa", id="i-live-in"),
        pytest.param(
            "I'm living in Tel Aviv with my wife since 2020.", "location", "Tel Aviv", "Lives in Tel Aviv",
            id="a-multiword-place-stops-at-punctuation-and-time-phrases",
        ),
        pytest.param("I work as a nurse at Rambam.", "role", "nurse", "Works as a nurse", id="i-work-as-a"),
        pytest.param("I'm a software engineer.", "role", "software engineer", "Works as a software engineer", id="i-am-a-role-noun-at-sentence-end"),
    ],
)
def test_a_stated_place_or_role_sets_its_profile_field_and_a_high_importance_fact(message, field, value, fact_text):
    result = extract_with_rules(message)
    assert getattr(result.profile_updates, field) == value
    assert fact(result, fact_text).importance == "high"


def test_i_moved_to_adds_lives_in_and_moved_to_facts():
    result = extract_with_rules("I moved to Rome last year.")
    assert result.profile_updates.location == "Rome"
    assert {"Lives in Rome", "Moved to Rome"} <= set(fact_texts(result))


def test_i_moved_from_one_city_to_another_supersedes_where_the_user_lived():
    result = extract_with_rules("I moved from Haifa to Rome.", {"facts": [{"id": "f-old", "text": "Lives in Haifa"}]})
    assert result.profile_updates.location == "Rome"
    assert fact(result, "Lives in Rome").supersedes == "f-old"


def test_i_am_from_is_a_fact_only_and_does_not_change_location():
    result = extract_with_rules("I'm from Italy.")
    assert result.profile_updates.location is None
    assert fact(result, "Is from Italy").importance == "high"


def test_new_location_supersedes_the_stored_active_lives_in_fact():
    stored = {
        "facts": [
            {"id": "f-old", "text": "Lives in Tel Aviv", "status": "active"},
            {"id": "f-gone", "text": "Lives in Eilat", "status": "superseded"},
            {"id": "f-dog", "text": "Has a dog named Rex"},
        ]
    }
    result = extract_with_rules("I moved to Haifa.", stored)
    assert fact(result, "Lives in Haifa").supersedes == "f-old"
    assert fact(result, "Moved to Haifa").supersedes is None


def test_a_stored_fact_said_again_is_extracted_again_and_supersedes_nothing():
    """The writer counts the repeat and adds this message to the fact's sources: skipped here, a
    deletion of the message that first said it deleted a fact another message still said."""
    stored = {"facts": [{"id": "f1", "text": "Lives in Haifa"}]}
    result = extract_with_rules("I live in Haifa.", stored)
    assert result.profile_updates.location == "Haifa"
    assert [(f.text, f.supersedes) for f in result.new_facts if f.text == "Lives in Haifa"] == [("Lives in Haifa", None)]


def test_lowercase_object_after_live_in_is_not_a_place():
    assert extract_with_rules("I live in a small flat.").profile_updates.location is None


def test_italian_and_hebrew_location_rules():
    it = extract_with_rules("Vivo a Milano.")
    assert it.profile_updates.location == "Milano" and "Lives in Milano" in fact_texts(it)
    he = extract_with_rules("אני גרה בחיפה.")
    assert he.profile_updates.location == "חיפה" and "Lives in חיפה" in fact_texts(he)
    he_m = extract_with_rules("אני גר בתל אביב")
    assert he_m.profile_updates.location == "תל אביב"


def test_a_role_said_with_when_it_holds_is_the_role():
    """"I'm a nurse now" set no role (only "I work as a nurse now" did), so a change of job said so was lost."""
    for said in ("I'm a nurse now.", "I am a nurse these days", "I don't work as a teacher anymore, I'm a nurse now."):
        result = extract_with_rules(said)
        assert result.profile_updates.role == "nurse" and "Works as a nurse" in fact_texts(result), said
    assert extract_with_rules("I am a bit tired now").profile_updates.role is None


def test_an_italian_denial_of_where_the_user_lives_sets_no_place():
    """"Non vivo a Roma" ("I don't live in Rome") was read as living in Rome."""
    for said in ("Non vivo a Roma.", "non abito in Italia, ma in Francia"):
        result = extract_with_rules(said)
        assert result.profile_updates.location is None and not any(f.startswith("Lives in") for f in fact_texts(result)), said


def test_hebrew_location_stops_before_the_and_prefix():
    result = extract_with_rules("אני גרה בחיפה ואני עובדת כאחות")
    assert result.profile_updates.location == "חיפה"
    assert result.profile_updates.role == "אחות"


# --------------------------------------------------------------------------- role
@pytest.mark.parametrize("message", ["I'm a big fan of jazz.", "I'm a nurse fan club member", "I'm a happy person."])
def test_i_am_a_is_conservative(message):
    result = extract_with_rules(message)
    assert result.profile_updates.role is None
    assert not any(t.startswith("Works as") for t in fact_texts(result))


def test_italian_role_rule():
    assert extract_with_rules("Lavoro come insegnante.").profile_updates.role == "insegnante"


# --------------------------------------------------------------------------- a place or a role that no longer holds
@pytest.mark.parametrize(
    "message, field, value, fact_text",
    [
        ("I no longer live in Rome.", "location", "Rome", "No longer lives in Rome"),
        ("I don't live in Rome anymore.", "location", "Rome", "No longer lives in Rome"),
        ("i don't live in rome any more", "location", "Rome", "No longer lives in Rome"),
        ("I'm no longer living in Rome, Italy.", "location", "Rome", "No longer lives in Rome"),
        ("I moved out of Rome last year.", "location", "Rome", "No longer lives in Rome"),
        ("Non vivo più a Roma.", "location", "Roma", "No longer lives in Roma"),
        ("I'm not a nurse anymore.", "role", "nurse", "No longer works as a nurse"),
        ("I'm no longer a nurse at the hospital.", "role", "nurse", "No longer works as a nurse"),
        ("I no longer work as a nurse.", "role", "nurse", "No longer works as a nurse"),
        ("I stopped working as an engineer.", "role", "engineer", "No longer works as an engineer"),
        ("I don't work as a backend developer anymore.", "role", "backend developer", "No longer works as a backend developer"),
        ("Non lavoro più come infermiere.", "role", "infermiere", "No longer works as infermiere"),
    ],
)
def test_a_place_or_role_the_user_says_no_longer_holds_is_retracted_and_not_set(message, field, value, fact_text):
    result = extract_with_rules(message)
    assert result.retracted == {field: value}
    assert getattr(result.profile_updates, field) is None and fact_texts(result) == [fact_text]


@pytest.mark.parametrize(
    "message",
    [
        "Do I still live in Rome?",
        "I no longer live in Rome? No, I still do.",  # asked, then denied: nothing is certain
        "My sister no longer lives in Rome.",
        "If I no longer lived in Rome, I'd miss it.",
        "My mom thinks I no longer live in Rome.",
        "I don't live in Rome.",  # no "no longer": may answer whether the user is there now
        "I'm not a fan anymore.",  # no role, as "I'm a fan" is none
        "I'm not sure anymore.",
        "I no longer live in a big city.",
    ],
)
def test_a_question_someone_elses_words_a_hypothetical_or_no_place_retracts_nothing(message):
    assert extract_with_rules(message).retracted == {}


def test_a_new_value_said_with_the_retraction_is_the_one_kept():
    result = extract_with_rules("I no longer live in Rome, I live in Milan now.")
    assert result.retracted == {} and result.profile_updates.location == "Milan"


# --------------------------------------------------------------------------- native language
@pytest.mark.parametrize(
    "message",
    ["My native language is Hebrew.", "I speak Hebrew natively.", "I'm a native Hebrew speaker.", "La mia lingua madre è ebraico.", "שפת האם שלי היא עברית"],
)
def test_native_language_rules(message):
    assert extract_with_rules(message).profile_updates.native_language == "Hebrew"


# --------------------------------------------------------------------------- preferences
def test_short_answers_sets_answer_length_short():
    assert extract_with_rules("I prefer short answers.").new_preferences.answer_length == "short"
    assert extract_with_rules("Please be brief.").new_preferences.answer_length == "short"


def test_detailed_answers_sets_answer_length_long():
    assert extract_with_rules("I prefer detailed explanations.").new_preferences.answer_length == "long"
    assert extract_with_rules("I like long answers.").new_preferences.answer_length == "long"


def test_long_walks_are_not_an_answer_length():
    result = extract_with_rules("I like long walks.")
    assert result.new_preferences.answer_length is None
    assert "Likes long walks" in fact_texts(result)


def test_bullet_points_and_code_examples_preferences():
    prefs = extract_with_rules("I like bullet points. I love code examples.").new_preferences
    assert prefs.prefers_bullets is True and prefs.code_examples is True
    negative = extract_with_rules("I don't like bullet points. No code examples please.").new_preferences
    assert negative.prefers_bullets is False and negative.code_examples is False


@pytest.mark.parametrize("message", ["Please answer in Italian.", "Reply in Italian", "Rispondi in italiano.", "תענה לי באיטלקית"])
def test_answer_language_preference(message):
    assert extract_with_rules(message).new_preferences.language == "Italian"


def test_i_prefer_other_things_goes_to_other_notes():
    prefs = extract_with_rules("I prefer tea over coffee.").new_preferences
    assert prefs.other_notes == ["Prefers tea over coffee"]


def test_likes_are_low_importance_facts_and_dislikes_are_recorded():
    result = extract_with_rules("I like jazz. I love hiking. I don't like cilantro. I hate traffic.")
    assert fact(result, "Likes jazz").importance == "low"
    assert "Loves hiking" in fact_texts(result)
    assert {"Dislikes cilantro", "Dislikes traffic"} <= set(fact_texts(result))


@pytest.mark.parametrize(
    "message, text",
    [("I don't like tea anymore.", "Dislikes tea"), ("I love jazz these days.", "Loves jazz"), ("I work as a teacher now.", "Works as a teacher")],
)
def test_when_a_liking_or_a_job_holds_is_no_part_of_its_object(message, text):
    assert fact_texts(extract_with_rules(message)) == [text]


def test_liking_the_conversation_is_not_a_fact():
    assert extract_with_rules("I like your answer. I love it.").new_facts == []


def test_italian_and_hebrew_likes():
    it = extract_with_rules("Mi piace il caffè. Non mi piace la pioggia.")
    assert {"Likes caffè", "Dislikes pioggia"} <= set(fact_texts(it))
    he = extract_with_rules("אני אוהבת קפה.")
    assert "Likes קפה" in fact_texts(he)


# --------------------------------------------------------------------------- goals
def test_goal_rules_add_profile_goals_and_facts():
    result = extract_with_rules("My goal is to pass the B2 exam. I want to learn Italian. I'm learning Spanish.")
    assert result.profile_updates.goals == ["pass the B2 exam", "learn Italian", "learn Spanish"]
    assert {"Wants to pass the B2 exam", "Wants to learn Italian", "Is learning Spanish"} <= set(fact_texts(result))


def test_i_want_to_know_is_a_request_not_a_goal():
    result = extract_with_rules("I want to know how to sort a list.")
    assert result.is_empty()


def test_italian_and_hebrew_learning_goals():
    assert "learn lo spagnolo" in extract_with_rules("Sto imparando lo spagnolo.").profile_updates.goals
    assert "Is learning איטלקית" in fact_texts(extract_with_rules("אני לומדת איטלקית"))


# --------------------------------------------------------------------------- tasks
@pytest.mark.parametrize(
    "message, description",
    [
        ("Remind me to call the bank.", "call the bank"),
        ("I need to renew my passport.", "renew my passport"),
        ("Don't let me forget to water the plants!", "water the plants"),
        ("todo: buy eggs", "buy eggs"),
        ("Ricordami di comprare il pane.", "comprare il pane"),
        ("תזכיר לי להתקשר לבנק", "להתקשר לבנק"),
    ],
)
def test_task_add_rules(message, description):
    updates = extract_with_rules(message).task_updates
    assert [(u.action, u.description) for u in updates] == [("add", description)]


@pytest.mark.parametrize(
    "message, description, due",
    [
        ("Remind me to call the dentist by Friday.", "call the dentist by Friday", "Friday"),
        ("I need to renew my passport tomorrow.", "renew my passport tomorrow", "tomorrow"),
        ("Remind me to pay rent on Monday.", "pay rent on Monday", "Monday"),
        ("Remind me tomorrow to call mom.", "call mom tomorrow", "tomorrow"),
        ("תזכיר לי להתקשר לבנק מחר", "להתקשר לבנק מחר", "מחר"),
    ],
)
def test_task_add_keeps_time_phrase_in_description_and_sets_due(message, description, due):
    (update,) = extract_with_rules(message).task_updates
    assert update.description == description
    assert update.due == due


def test_task_without_time_phrase_has_no_due():
    (update,) = extract_with_rules("Remind me to water the plants.").task_updates
    assert update.due is None


def test_i_need_to_understand_is_not_a_task():
    assert extract_with_rules("I need to understand recursion.").task_updates == []


STORED_TASKS = {
    "tasks": [
        {"id": "t-bank", "description": "call the bank", "status": "open"},
        {"id": "t-milk", "description": "buy milk for the kids", "status": "open"},
        {"id": "t-old", "description": "call the plumber", "status": "done"},
        {"id": "t-pane", "description": "comprare il pane", "status": "open"},
    ]
}


@pytest.mark.parametrize(
    "message, task_id",
    [
        ("I finished calling the bank.", "t-bank"),
        ("I've done the bank call.", "t-bank"),
        ("I did buy the milk.", "t-milk"),
        ("Buying milk is done.", "t-milk"),
        ("Ho finito di comprare il pane.", "t-pane"),
    ],
)
def test_task_completion_is_matched_to_the_stored_open_task_id(message, task_id):
    updates = extract_with_rules(message, STORED_TASKS).task_updates
    assert [(u.action, u.task_id, u.status) for u in updates] == [("complete", task_id, "done")]


def test_completion_never_matches_a_task_that_is_already_done():
    assert extract_with_rules("I finished calling the plumber.", STORED_TASKS).task_updates == []


def test_completion_without_a_matching_stored_task_is_ignored():
    assert extract_with_rules("I did it.", STORED_TASKS).task_updates == []
    assert extract_with_rules("I finished the book.", {}).task_updates == []


# --------------------------------------------------------------------------- possessions and "my X is Y"
def test_i_have_a_and_my_x_is_y_become_facts():
    result = extract_with_rules("I have a dog named Rex. My favourite colour is blue. My wife's name is Noa.")
    assert {"Has a dog named Rex", "Favourite colour is blue", "Wife's name is Noa"} <= set(fact_texts(result))
    assert fact(result, "Wife's name is Noa").importance == "high"  # family
    assert fact(result, "Favourite colour is blue").importance == "low"  # a like


def test_family_and_health_facts_are_high_importance():
    result = extract_with_rules("I have two kids. I'm allergic to peanuts.")
    assert fact(result, "Has two kids").importance == "high"
    assert fact(result, "Is allergic to peanuts").importance == "high"


def test_conversational_objects_are_not_facts():
    assert extract_with_rules("I have a question. My code is broken. My question is simple.").new_facts == []


def test_other_facts_default_to_medium_importance():
    assert fact(extract_with_rules("My birthday is May 3."), "Birthday is May 3").importance == "medium"


# --------------------------------------------------------------------------- whole messages
def test_questions_never_produce_facts_or_profile_updates():
    result = extract_with_rules("Where do I live? Is my name Dana? Do I need to bring my passport? Do I like jazz?")
    assert result.is_empty()


def test_a_reminder_asked_as_a_question_still_adds_a_task():
    result = extract_with_rules("Can you remind me to call mom?")
    assert result.new_facts == []
    assert [u.description for u in result.task_updates] == ["call mom"]


def test_hypotheticals_produce_nothing():
    assert extract_with_rules("If I lived in Paris I would be happy.").is_empty()


@pytest.mark.parametrize(
    "message",
    ["My friend said my name is Bob.", 'My friend said "my name is Bob".', "My friend told me: I live in Rome.", "You think I live in Rome."],
)
def test_what_someone_else_said_or_thinks_is_not_the_users_statement(message):
    assert extract_with_rules(message).is_empty()


def test_what_the_user_says_they_said_still_counts():
    assert extract_with_rules("As I said, my name is Dana.").profile_updates.name == "Dana"
    assert extract_with_rules("My name is Dana and my friend says I live in Rome.").profile_updates.model_dump(exclude_defaults=True) == {"name": "Dana"}


def test_several_sentences_are_each_processed():
    result = extract_with_rules(
        "My name is Dana. I live in Haifa; I work as a nurse. I have a dog named Rex! Remind me to call the bank by Friday."
    )
    assert result.profile_updates.name == "Dana"
    assert result.profile_updates.location == "Haifa"
    assert result.profile_updates.role == "nurse"
    assert {"Lives in Haifa", "Works as a nurse", "Has a dog named Rex"} <= set(fact_texts(result))
    assert [u.due for u in result.task_updates] == ["Friday"]


def test_duplicates_within_one_message_are_removed():
    result = extract_with_rules("I like jazz. I like jazz! Remind me to call mom. Remind me to call mom.")
    assert fact_texts(result).count("Likes jazz") == 1
    assert len(result.task_updates) == 1


def test_nothing_memorable_gives_an_empty_result():
    assert extract_with_rules("How do I sort a list in Python?").is_empty()
    assert extract_with_rules("").is_empty()


@pytest.mark.parametrize("stored", [None, {}, {"facts": None, "tasks": None}, {"facts": ["Lives in Rome"], "tasks": ["call mom"]}, {"profile": {}}])
def test_stored_memories_with_missing_or_odd_keys_are_tolerated(stored):
    result = extract_with_rules("I moved to Haifa. I finished calling mom.", stored)
    assert result.profile_updates.location == "Haifa"


def test_extraction_is_deterministic():
    message = "My name is Dana. I live in Haifa. I like jazz. Remind me to call the bank by Friday."
    assert extract_with_rules(message).model_dump() == extract_with_rules(message).model_dump()


def test_family_sentence_with_my_x_is_y_is_a_high_importance_fact():
    assert fact(extract_with_rules("My mother is a teacher."), "Mother is a teacher").importance == "high"


def test_one_word_need_is_not_a_task():
    assert extract_with_rules("I need to go.").task_updates == []


def test_a_greeting_then_i_am_name_sets_the_name_but_states_and_nationalities_do_not():
    assert extract_with_rules("Hi! I'm Maya").profile_updates.name == "Maya"
    assert extract_with_rules("Hello. I am Noa Levi.").profile_updates.name == "Noa Levi"
    for text in ("I'm Italian.", "I'm Tired", "I'm Back!"):
        assert extract_with_rules(text).profile_updates.name is None, text


def test_a_lowercase_state_after_i_am_is_not_a_name_though_the_rules_ignore_case():
    # LoCoMo's "I'm super thankful." made the user's profile name "super thankful".
    for text in ("I'm super thankful.", "Honestly I'm so glad.", "I'm really into it, and more"):
        assert extract_with_rules(text).profile_updates.name is None, text
    assert extract_with_rules("I'm Noa levi.").profile_updates.name == "Noa"
    assert extract_with_rules("hey i'm maya").profile_updates.name == "maya"
    assert extract_with_rules("i'm super thankful.").profile_updates.name is None


def test_code_examples_in_a_language_keep_the_language():
    prefs = extract_with_rules("I prefer code examples in Python").new_preferences
    assert prefs.code_examples is True and prefs.other_notes == ["Prefers code examples in Python"]
    assert extract_with_rules("no code examples in Java please").new_preferences.other_notes == []


# --------------------------------------------------------------------------- how people introduce themselves
def test_the_maya_sentence_gives_name_role_city_short_answers_and_python_examples():
    result = extract_with_rules("Hi! I'm Maya, a backend developer in Lisbon. I prefer short answers with Python examples.")
    profile, prefs = result.profile_updates, result.new_preferences
    assert (profile.name, profile.role, profile.location) == ("Maya", "backend developer", "Lisbon")
    assert (prefs.answer_length, prefs.code_examples, prefs.other_notes) == ("short", True, ["Prefers code examples in Python"])
    assert fact_texts(result) == ["Works as a backend developer", "Lives in Lisbon"]


def test_the_dana_introduction_gives_name_city_and_job():
    profile = extract_with_rules("Hi! My name is Dana, I live in Haifa and I work as a nurse.").profile_updates
    assert (profile.name, profile.location, profile.role) == ("Dana", "Haifa", "nurse")


@pytest.mark.parametrize(
    "message, role, location",
    [
        ("I'm a teacher at Lincoln High.", "teacher", None),
        ("I'm a teacher at a school in Milan and I love it", "teacher", "Milan"),
        ("I am a nurse based in Haifa", "nurse", "Haifa"),
        ("I'm based in Berlin.", None, "Berlin"),
        ("I'm working as a barista in Rome", "barista", "Rome"),
        ("I'm a developer in Python.", "developer", None),  # a language is not a city
        ("I live in Porto. I'm a student in Lisbon.", "student", "Porto"),  # said outright wins
    ],
)
def test_job_and_city_in_the_shapes_people_introduce_themselves_with(message, role, location):
    profile = extract_with_rules(message).profile_updates
    assert (profile.role, profile.location) == (role, location)


def test_names_that_end_like_languages_are_still_names():
    for name in ("Brian", "Julian", "Milan"):
        assert extract_with_rules(f"Hi! I'm {name}.").profile_updates.name == name


@pytest.mark.parametrize(
    "message",
    ["I'm tired", "I'm Tired.", "I'm Exhausted.", "I'm Sorry, I forgot.", "I'm Italian.", "Hi! I'm Nurse.", "I'm a big fan of jazz."],
)
def test_states_nationalities_and_roles_are_not_names(message):
    assert extract_with_rules(message).profile_updates.name is None


def test_languages_spoken_and_programming_languages_are_facts():
    assert fact_texts(extract_with_rules("I speak Hebrew and English.")) == ["Speaks Hebrew and English"]
    assert fact_texts(extract_with_rules("I speak a little Spanish")) == ["Speaks a little Spanish"]
    assert fact_texts(extract_with_rules("I code in Go and Rust")) == ["Programs in Go and Rust"]
    assert fact_texts(extract_with_rules("I code in C++ and C#.")) == ["Programs in C++ and C#"]


def test_words_that_only_look_like_languages_are_not():
    for message in ("I speak my mind.", "I work in R&D", "I want to go examples"):
        assert extract_with_rules(message).is_empty(), message


def test_the_language_of_code_examples_is_kept_in_any_common_wording():
    for message in ("I prefer short answers with Python examples.", "I like Python snippets", "Examples in Python please, always."):
        assert "Prefers code examples in Python" in extract_with_rules(message).new_preferences.other_notes, message
    assert extract_with_rules("no Java examples please").new_preferences.other_notes == []


def test_a_field_of_work_an_instrument_and_a_diet_are_facts_but_not_their_lookalikes():
    assert fact_texts(extract_with_rules("I work in marketing. Do you have any hobbies?")) == ["Works in marketing"]
    assert fact_texts(extract_with_rules("I play the trumpet. I play tennis too.")) == ["Plays the trumpet", "Plays tennis"]
    assert fact_texts(extract_with_rules("I don't eat meat but I like grilled veggies.")) == ["Does not eat meat", "Likes grilled veggies"]
    for message in ("I work in shifts.", "I play the game often.", "I work in Lisbon."):
        assert extract_with_rules(message).new_facts == [], message


def test_a_goal_verb_whose_object_came_before_it_is_not_a_goal():
    # LoCoMo's "visa requirements for some places I want to visit" gave the goal "visit".
    assert extract_with_rules("I'm researching visa requirements for places I want to visit.").profile_updates.goals in (None, [])
    assert extract_with_rules("I want to retire.").profile_updates.goals == ["retire"]
    assert extract_with_rules("I want to visit The Cliffs of Moher.").profile_updates.goals == ["visit The Cliffs of Moher"]


@pytest.mark.parametrize(
    "message",
    [
        "Moments like these remind me to appreciate the ones I love.",
        "Turtles always remind me to slow down and appreciate the small things in life.",
        "I have a painting in my room to remind me to stay true.",
    ],
)
def test_remind_me_inside_a_statement_is_not_a_task(message):
    # LoCoMo's lines made tasks like "appreciate the ones I love".
    assert extract_with_rules(message).task_updates == []


@pytest.mark.parametrize(
    "message",
    ["Remind me to call mom.", "Please remind me to water the plants.", "Oh, and can you remind me to book the dentist?", "ok remind me to pay rent", "I need you to remind me to renew my passport.", "Don't forget to remind me to call mom.", "Remember to remind me to pay rent."],
)
def test_asking_to_be_reminded_is_still_a_task(message):
    assert [t.action for t in extract_with_rules(message).task_updates] == ["add"]


def test_as_i_like_to_say_is_not_a_liking():
    assert fact_texts(extract_with_rules("As I like to say, there is no sport better than football.")) == []
    assert fact_texts(extract_with_rules("I like to swim.")) == ["Likes to swim"]


def test_facts_and_goals_are_in_the_third_person_even_when_the_rule_copies_the_users_words():
    # The extraction contract says third person; "Wants to … my endurance" read as the assistant's.
    result = extract_with_rules("I want to get stronger and improve my endurance.")
    assert fact_texts(result) == ["Wants to get stronger and improve their endurance"]
    assert result.profile_updates.goals == ["get stronger and improve their endurance"]
    assert fact_texts(extract_with_rules("I love sharing what I know.")) == ["Loves sharing what they know"]


@pytest.mark.parametrize(
    "message",
    [
        "Yeah, I love to. It's peaceful.",
        "Being my own boss and doing something I love is awesome.",
        "That's what I like to hear!",
        "I'm grateful to have a job I enjoy every day.",
        "I've been thinking about where I want to be in the future.",
    ],
)
def test_a_liking_or_goal_whose_object_came_before_it_stores_nothing(message):
    # Each of these LoCoMo lines gave a fact like "Loves is awesome" or "Wants to be in the future".
    result = extract_with_rules(message)
    assert fact_texts(result) == [] and not result.profile_updates.goals, message


# --------------------------------------------------------------------------- values the schema refuses
def test_a_value_the_schema_refuses_is_left_out_and_the_rest_of_the_message_is_kept():
    """A 2,000-character "like", a 201-character name or role, a 51st item, a task of invisible
    characters: the rules built them and the schema refused the whole result, so the turn kept no
    memory at all (a review's fuzzing, stop 62)."""
    result = extract_with_rules("I like " + "a" * 1995 + ". My name is " + "A" * 201 + ". I live in Lisbon. Remind me to \u200b.")
    assert [f.text for f in result.new_facts] == ["Lives in Lisbon"]
    assert (result.profile_updates.name, result.profile_updates.location) == (None, "Lisbon")
    assert result.task_updates == []
    result = extract_with_rules("I work as a " + "x" * 201 + ". I prefer " + "x" * 600 + ". todo: \u3164")
    assert result.profile_updates.role is None and result.new_preferences.other_notes == [] and result.task_updates == []


def test_a_message_stating_more_than_fifty_things_keeps_the_first_fifty():
    assert len(extract_with_rules(" ".join(f"I like t{i}." for i in range(60))).new_facts) == 50
    assert len(extract_with_rules(" ".join(f"Remind me to call person{i}." for i in range(60))).task_updates) == 50
    assert len(extract_with_rules(" ".join(f"I prefer style{i}." for i in range(60))).new_preferences.other_notes) == 50


def test_a_sentence_is_read_for_how_to_answer_once_however_many_times_it_says_always(monkeypatch):
    """Each "always" matched again and the whole sentence was read at every match: quadratic, so a
    20,000-character paste of "always, …" held the event loop for 30 s (a review's fuzzing, stop 62)."""
    import offline_model.rules.wishes_and_tasks as rules

    read, style = [], rules._style
    monkeypatch.setattr(rules, "_style", lambda clause, b, negative: read.append(clause) or style(clause, b, negative=negative))
    result = extract_with_rules("Always short answers, always bullet points, and always no emojis")
    assert len(read) == 3  # one reading of each clause, not one per "always"
    assert (result.new_preferences.answer_length, result.new_preferences.prefers_bullets) == ("short", True)
    assert result.new_preferences.other_notes == ["No emojis"]


def test_a_task_keeps_an_iso_date_a_clock_time_and_two_time_words_as_said():
    """"on 2027-03-15" was read as the due "03-15" and written "File taxes on 2027-on Mon 15 Mar
    2027"; "at 10:30" was cut at the colon to "at 10"; "at 5pm tomorrow" was due today at 5pm
    (a review's fuzzing of the HTTP API, stop 62)."""
    from datetime import datetime, timezone

    from memory.extractor import with_dates

    def task(text: str) -> tuple:
        [t] = with_dates(extract_with_rules(text), datetime(2026, 12, 2, 10, tzinfo=timezone.utc)).task_updates
        return t.description, t.due_date

    assert task("Remind me to file taxes on 2027-03-15") == ("File taxes on Mon 15 Mar 2027", "2027-03-15")
    assert task("Remind me to call Ana at 10:30") == ("call Ana at 10:30", None)
    assert task("Remind me to call mom at 5pm tomorrow") == ("Call mom on Thu 3 Dec 2026 at 5pm", "2026-12-03")
    assert task("Remind me to call mom tomorrow at 5pm") == ("Call mom on Thu 3 Dec 2026 at 5pm", "2026-12-03")
    # Two day words are not one due: the task's own is the one kept (a review of the change above).
    assert task("Remind me today to email Bob tomorrow morning.")[1] == "2026-12-03"
    assert task("I need to send the report Friday end of day.")[1] == "2026-12-04"
    assert task("Remind me tomorrow to renew the lease December 3.")[1] == "2026-12-03"


def test_a_request_for_fiction_is_no_statement_and_a_corrected_value_wins():
    """"Write a story where I live in Mars" stored Mars as the user's city, and "I live in Haifa.
    Just kidding, I live in Tel Aviv" kept Haifa with both facts current."""
    for fiction in ("Write a story where I live in Mars and work as a pilot", "Can you tell me a joke about how I work as a nurse?",
                    "Pretend I live in Narnia", "Imagine a role-play where I work as a spy",
                    "Let's do a roleplay where I live in Haifa.", "For this game, pretend I live in Haifa."):
        result = extract_with_rules(fiction)
        assert (result.profile_updates.location, result.profile_updates.role, fact_texts(result)) == (None, None, []), fiction
    corrected = extract_with_rules("I live in Haifa. Just kidding, I live in Tel Aviv")
    assert corrected.profile_updates.location == "Tel Aviv"
    assert [t for t in fact_texts(corrected) if t.startswith("Lives in")] == ["Lives in Tel Aviv"]
    assert extract_with_rules("I live in Rome and I love stories").profile_updates.location == "Rome"
    assert extract_with_rules("Can you draft a script for my talk, I work as a nurse.").profile_updates.role == "nurse"
