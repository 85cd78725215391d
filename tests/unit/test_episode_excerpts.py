"""Excerpts of earlier conversations in the reply prompt: dated, named by their chat, within their
own budget, after the stable prefix (system text, then the summary)."""

from langchain_core.messages import HumanMessage

from core.tokens import count_tokens
from prompts.reply_prompt import EPISODES_HEADER, MESSAGE_HEADER, PromptBudgets, build_prompt, parse_sections, user_words


def _excerpt(i: int, day: int = 8) -> dict:
    return {
        "thread_id": f"t{i}",
        "chat_title": f"Chat {i}",
        "lines": [
            {"message_id": f"q{i}", "role": "user", "sent_at": f"2023-05-{day:02d}T13:56:00+00:00", "text": f"Question {i} " * 30},
            {"message_id": f"a{i}", "role": "assistant", "sent_at": f"2023-05-{day + 1:02d}T09:00:00+00:00", "text": f"yes, in March END{i}"},
        ],
    }


def _build(excerpts, facts=(), budget=1200, profile=None):
    loaded = {"profile": profile or {"name": "Dana"}, "facts": [{"text": f} for f in facts], "excerpts": list(excerpts)}
    return build_prompt(persona_text="You help.", loaded_context=loaded, summary_text="", knowledge=[],
                        recent=[], current=HumanMessage("when?"), budgets=PromptBudgets(episodes=budget))


def test_each_excerpt_is_dated_and_named_by_its_chat_and_a_line_of_another_day_carries_its_date():
    section = parse_sections(_build([_excerpt(1)]).messages)[EPISODES_HEADER]
    assert section.startswith('[8 May 2023, "Chat 1"]\nuser: Question 1')
    assert "\nassistant (9 May 2023): yes, in March END1" in section


def test_excerpts_stay_within_their_budget_whole():
    built = _build([_excerpt(i) for i in range(10)], budget=300)
    section = parse_sections(built.messages)[EPISODES_HEADER]
    assert count_tokens(section) <= 300 and built.section_tokens["episodes"] <= 300
    kept = [i for i in range(10) if f"END{i}" in section]
    assert kept and all(f"Question {i}" not in section for i in range(10) if i not in kept)  # none cut in two


def test_what_a_message_brings_and_the_profile_travel_with_it_so_the_system_message_is_the_same_whatever_they_are():
    one = _build([_excerpt(1)], facts=["Likes tea"]).messages
    # A new user's early turns teach the profile: that must not change the cached prefix either.
    two = _build([], facts=["Has a dog"], profile={"name": "Dana", "location": "Haifa"}).messages
    assert one[0].text == two[0].text  # system text and summary: the cached prefix
    assert "You help." in one[0].text and "Dana" not in one[0].text
    assert "Likes tea" not in one[0].text and EPISODES_HEADER not in one[0].text
    current = one[-1].text  # the profile, the facts ranked for it and the excerpts open the current message
    assert current.index("- name: Dana") < current.index("Likes tea") < current.index(EPISODES_HEADER) < current.index(MESSAGE_HEADER)
    assert user_words(one[-1]) == "when?"


def test_a_turn_later_the_prompt_starts_with_the_previous_prompt_up_to_its_current_message():
    """The recent conversation sits between the stable system message and the current message, so
    the next turn's prompt repeats the previous one's messages up to the one that changed."""
    from langchain_core.messages import AIMessage

    loaded = {"profile": {"name": "Dana"}, "facts": [{"text": "Likes tea"}]}
    history = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]
    first = build_prompt(persona_text="You help.", loaded_context=loaded, summary_text="", knowledge=[],
                         recent=history, current=HumanMessage("tea?", id="h2"))
    second = build_prompt(persona_text="You help.", loaded_context={**loaded, "facts": [{"text": "Has a dog"}]}, summary_text="",
                          knowledge=[], recent=[*history, HumanMessage("tea?", id="h2"), AIMessage("yes", id="a2")],
                          current=HumanMessage("dog?", id="h3"))
    assert [m.text for m in second.messages[:3]] == [m.text for m in first.messages[:3]]
    assert second.messages[3].text == "tea?"  # shown as the user wrote it, without what was found for it then


def test_an_excerpt_of_the_same_chat_as_the_one_before_is_headed_by_its_date_alone_or_on_the_same_day_by_an_ellipsis():
    same_day = {**_excerpt(4, day=8), "thread_id": "t1", "chat_title": "Chat 1"}
    later = {**_excerpt(2, day=20), "thread_id": "t1", "chat_title": "Chat 1"}
    other = _excerpt(3, day=25)
    section = parse_sections(_build([_excerpt(1), same_day, later, other], budget=2000).messages)[EPISODES_HEADER]
    headers = [line for line in section.splitlines() if line.startswith("[") or line == "…"]
    assert headers == ['[8 May 2023, "Chat 1"]', "…", "[20 May 2023]", '[25 May 2023, "Chat 3"]']
    assert "END1\n…\nuser: Question 4" in section  # the same conversation goes on, no blank line


def test_an_excerpt_read_back_in_another_time_zone_shows_the_utc_days_its_dates_meant_are_in():
    # 03:00 UTC on 8 May 2023 read back by a session in Los Angeles: 20:00 on 7 May there. The
    # excerpt's day and the date its "yesterday" meant are UTC days, as the index's dates_meant and
    # a question's named day are, whatever the database session's zone.
    excerpt = {
        "thread_id": "t1",
        "chat_title": "Bikes",
        "lines": [{"message_id": "m1", "role": "user", "sent_at": "2023-05-07T20:00:00-07:00", "text": "Yesterday I biked to Sintra"}],
    }
    section = parse_sections(_build([excerpt]).messages)[EPISODES_HEADER]
    assert section.startswith('[8 May 2023, "Bikes"]\nuser: Yesterday (7 May 2023) I biked to Sintra')
