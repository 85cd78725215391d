"""The reader check of `eval recall` (issue 28, item 5) on the real local model: it must measure what
reached the prompt, so a prompt that holds the answer must get an answer, not a refusal."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from langchain_core.messages import AIMessage, HumanMessage

from core.contracts import Excerpt, ExcerptLine, LoadedContext
from evals.datasets.schema import Probe
from evals.recall_eval import Asked
from evals.recall_reader import run_reader_check
from prompts.reply_prompt import PromptBudgets, build_prompt

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
# Two friends' turns as `eval recall` imports them (the speaker's name opens each message), with the
# answers to three questions among others, as a memory-agent prompt shows them.
TURNS = [
    ("user", "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."),
    ("assistant", "Melanie: Wow, love that painting! So cool you found such a helpful group. What's it done for you?"),
    ("user", "Caroline: The support group has made me feel accepted and given me courage to embrace myself."),
    ("assistant", "Melanie: Yeah, I painted that lake sunrise last year! It's special to me."),
    ("user", "Caroline: Wow, Melanie! The colors really blend nicely. Painting looks like a great outlet."),
    ("assistant", "Melanie: Thanks, Caroline! Painting's a fun way to express my feelings and get creative."),
    ("user", "Caroline: I've been researching adoption agencies. It's been a dream to have a family."),
    ("assistant", "Melanie: That's amazing! Which agency are you looking at?"),
    ("user", "Caroline: One that supports LGBTQ folks. Their inclusivity means a lot to me."),
    ("assistant", "Melanie: We went camping with the kids last weekend, we roasted marshmallows by the fire."),
]
QUESTIONS = [
    Probe(question="When did Caroline go to the LGBTQ support group?", answer="7 May 2023", category=2),
    Probe(question="When did Melanie paint a sunrise?", answer="2022", category=2),
    Probe(question="What did Caroline research?", answer="Adoption agencies", category=1),
]


def memory_prompt(question: str) -> list:
    lines = [
        ExcerptLine(message_id=f"m{i}", position=i, role=role, sent_at=(SAID + timedelta(minutes=i)).isoformat(), text=text)
        for i, (role, text) in enumerate(TURNS)
    ]
    excerpt = Excerpt(thread_id="t1", chat_title="Caroline and Melanie", score=1.0, lines=lines)
    loaded = LoadedContext(profile={}, preferences={}, facts=[], tasks=[], related_chats=[], excerpts=[excerpt])
    recent = [HumanMessage("Caroline: Thanks, Melanie. Your support really means a lot."), AIMessage("Melanie: Always!")]
    return build_prompt(
        persona_text="You are a helpful, direct assistant with long-term memory of this user.",
        loaded_context=loaded, summary_text="", knowledge=[], recent=recent,
        current=HumanMessage(question), budgets=PromptBudgets(),
    ).messages


async def test_the_reader_answers_from_a_memory_prompt_that_holds_the_answers_instead_of_saying_it_has_no_information(real_model):
    # Given a "No information available" escape, the 0.5B and the 1.5B took it for each of these
    # three, and for two questions in three of the 28 Nov reader check: F1 measured the refusals.
    asked = [
        Asked(probe=p, conversation="c", messages=memory_prompt(p.question), tokens=0, answer_recall=1.0, evidence_recall=1.0)
        for p in QUESTIONS
    ]
    check = await run_reader_check(real_model, {"memory-agent": asked}, ["c"], size=0, systems=("memory-agent",))

    answers = [a.answer for a in asked]
    assert check.systems["memory-agent"].refusals == 0, answers
    assert all(a.f1 and a.f1 > 0 for a in asked), answers  # each answer shares a word with the gold one
