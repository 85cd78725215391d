"""The reader check's fixed sample and prompt (evals.recall_reader)."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import HumanMessage, SystemMessage

from evals.recall_reader import READER_INSTRUCTION, reader_messages, reader_sample


@dataclass
class _Asked:
    conversation: str


def test_the_sample_is_evenly_spaced_over_the_named_conversations_and_the_same_every_time():
    asked = [_Asked("a")] * 10 + [_Asked("b")] * 10 + [_Asked("c")] * 10

    chosen = reader_sample(asked, ["b", "c"], 4)

    assert chosen == [10, 15, 20, 25]
    assert reader_sample(asked, ["b", "c"], 4) == chosen
    assert reader_sample(asked, ["a"], 0) == list(range(10))  # 0: every question
    assert reader_sample(asked, ["a"], 50) == list(range(10))  # never more than there are


def test_the_reader_prompt_is_the_built_prompt_with_the_short_answer_line_under_the_question():
    built = [SystemMessage("rules"), HumanMessage("found for it\n\nWhen did she go?")]

    sent = reader_messages(built)

    assert sent[0] is built[0]
    assert sent[1].text == f"found for it\n\nWhen did she go?\n\n{READER_INSTRUCTION}"
    assert built[1].text == "found for it\n\nWhen did she go?"  # the scored prompt is left as it was
