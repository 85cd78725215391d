"""The reply prompt holds one budget: each section keeps its own, and the excerpts of earlier
conversations take what the others leave, best first, shown oldest first."""

from datetime import datetime, timedelta, timezone

from langchain_core.messages import AIMessage, HumanMessage

from core.context import Context
from nodes.reply import persona_text
from core.tokens import count_message_tokens
from prompts.reply_prompt import EPISODES_HEADER, MESSAGE_HEADER, USER_CONTEXT_HEADER, PromptBudgets, build_prompt, parse_sections

START = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)


def _excerpt(i: int, words: int = 40) -> dict:
    return {"thread_id": "t1", "chat_title": "Chat", "score": 1.0 / (i + 1), "lines": [
        {"message_id": f"m{i}", "position": 10 * i, "role": "user", "sent_at": (START + timedelta(days=i)).isoformat(),
         "text": f"EX{i} " + "word " * words}]}


def _recent(n: int) -> list:
    return [(HumanMessage if k % 2 == 0 else AIMessage)(f"recent message {k} " + "talk " * 45, id=f"r{k}") for k in range(n)]


def _build(recent_messages: int, summary_words: int = 300):
    return build_prompt(persona_text="You help.", loaded_context={"facts": [{"text": "Likes tea"}], "excerpts": [_excerpt(i) for i in range(60)]},
                        summary_text="summary " * summary_words, knowledge=[], recent=_recent(recent_messages),
                        current=HumanMessage("what did I say?"))


def test_the_whole_prompt_holds_the_default_budget_whatever_the_other_sections_take():
    total = Context().prompt_token_budget
    assert total == 2000
    for recent_messages in (0, 4, 10, 16):
        built = _build(recent_messages)
        tokens = count_message_tokens(built.messages)
        assert tokens <= total
        assert tokens >= total - 60  # the excerpts took what was left, not a fixed share


def test_the_excerpts_take_more_when_the_recent_conversation_takes_less():
    short, long = _build(2), _build(12)
    assert short.section_tokens["episodes"] > long.section_tokens["episodes"] + 400
    assert short.section_tokens["recent"] < long.section_tokens["recent"]


def test_when_the_other_sections_fill_the_budget_no_excerpt_is_shown():
    built = _build(40, summary_words=300)
    assert built.section_tokens["episodes"] == 0
    assert parse_sections(built.messages)[EPISODES_HEADER] == ""


def test_the_best_excerpts_are_kept_and_shown_oldest_first():
    # Found best first: the newest is the best match. Room for two of the three.
    ranked = [_excerpt(2, 200), _excerpt(0, 200), _excerpt(1, 200)]
    built = build_prompt(persona_text="You help.", loaded_context={"excerpts": ranked}, summary_text="", knowledge=[], recent=[],
                         current=HumanMessage("what did I say?"), budgets=PromptBudgets(episodes=500))
    section = parse_sections(built.messages)[EPISODES_HEADER]
    assert "EX2" in section and "EX0" in section and "EX1" not in section
    assert section.index("EX0") < section.index("EX2")


def test_the_brief_layout_gives_a_small_model_short_rules_and_only_the_sections_memory_filled():
    # The 0.5B recited the full rules ("To use the labelled sections, ...") or the user's message back.
    persona = "You are a helpful assistant."
    empty = build_prompt(persona_text=persona, loaded_context={}, summary_text="", knowledge=[], recent=[],
                         current=HumanMessage("Hi! My name is Dana."), brief=True).messages
    assert [m.text for m in empty] == ["You are a helpful assistant. Answer the user's newest message in your own words. Follow their stated preferences.",
                                       "Hi! My name is Dana."]
    filled = build_prompt(persona_text=persona, loaded_context={"profile": {"name": "Dana"}}, summary_text="", knowledge=[], recent=[],
                          current=HumanMessage("What do you know about me?"), brief=True).messages
    assert "(none)" not in filled[-1].text and "(none)" not in filled[0].text
    assert parse_sections(filled)[USER_CONTEXT_HEADER] == "Profile:\n- name: Dana"
    assert filled[-1].text.endswith(f"{MESSAGE_HEADER}\nWhat do you know about me?") and EPISODES_HEADER not in filled[-1].text
    full = build_prompt(persona_text=persona, loaded_context={}, summary_text="", knowledge=[], recent=[], current=HumanMessage("Hi!")).messages
    assert "(none)" in full[-1].text and "labelled sections" in full[0].text  # the default layout is unchanged


def test_the_brief_layout_still_holds_the_whole_prompts_budget():
    brief = build_prompt(persona_text="You help.", loaded_context={"excerpts": [_excerpt(i) for i in range(60)]}, summary_text="",
                         knowledge=[], recent=_recent(4), current=HumanMessage("what did I say?"),
                         budgets=PromptBudgets(total=1500), brief=True)
    assert parse_sections(brief.messages)[EPISODES_HEADER] and count_message_tokens(brief.messages) <= 1500


def test_under_the_brief_layout_a_named_persona_is_its_first_sentence_and_the_callers_own_prompt_stays_whole():
    assert persona_text(Context(reply_rules="brief")) == "You are a helpful, direct assistant with long-term memory of this user."
    assert persona_text(Context(reply_rules="brief", persona="tutor")) == "You are a patient tutor."
    own = "You are Ada. Always answer in French. Never use emojis."
    assert persona_text(Context(reply_rules="brief", system_prompt=own)) == own
    assert "do not recite it back" in persona_text(Context())  # the full layout keeps the whole persona
