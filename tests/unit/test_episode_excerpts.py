"""Excerpts of earlier conversations in the reply prompt: dated, named by their chat, within their
own budget, after the stable prefix (system text, then the profile)."""

from langchain_core.messages import HumanMessage

from core.tokens import count_tokens
from prompts.reply_prompt import EPISODES_HEADER, PromptBudgets, build_prompt, parse_sections


def _excerpt(i: int, day: int = 8) -> dict:
    return {
        "thread_id": f"t{i}",
        "chat_title": f"Chat {i}",
        "lines": [
            {"message_id": f"q{i}", "role": "user", "sent_at": f"2023-05-{day:02d}T13:56:00+00:00", "text": f"Question {i} " * 30},
            {"message_id": f"a{i}", "role": "assistant", "sent_at": f"2023-05-{day + 1:02d}T09:00:00+00:00", "text": f"yes, in March END{i}"},
        ],
    }


def _build(excerpts, facts=(), budget=1200):
    loaded = {"profile": {"name": "Dana"}, "facts": [{"text": f} for f in facts], "excerpts": list(excerpts)}
    return build_prompt(persona_text="You help.", loaded_context=loaded, summary_text="", knowledge=[],
                        recent=[], current=HumanMessage("when?"), budgets=PromptBudgets(episodes=budget))


def test_each_excerpt_is_dated_and_named_by_its_chat_and_a_line_of_another_day_carries_its_date():
    section = parse_sections(_build([_excerpt(1)]).messages[0].text)[EPISODES_HEADER]
    assert section.startswith('[8 May 2023, "Chat 1"]\nuser: Question 1')
    assert "\nassistant (9 May 2023): yes, in March END1" in section


def test_excerpts_stay_within_their_budget_whole():
    built = _build([_excerpt(i) for i in range(10)], budget=300)
    section = parse_sections(built.messages[0].text)[EPISODES_HEADER]
    assert count_tokens(section) <= 300 and built.section_tokens["episodes"] <= 300
    kept = [i for i in range(10) if f"END{i}" in section]
    assert kept and all(f"Question {i}" not in section for i in range(10) if i not in kept)  # none cut in two


def test_the_prompt_opens_with_the_same_prefix_whatever_the_message_brings():
    one = _build([_excerpt(1)], facts=["Likes tea"]).messages[0].text
    two = _build([], facts=["Has a dog"]).messages[0].text
    prefix = one[: next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)]
    assert "You help." in prefix and "- name: Dana" in prefix  # system text and profile are cached together
    assert one.index(EPISODES_HEADER) > one.index("Likes tea")  # what each message brings comes after
