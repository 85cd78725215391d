"""Answer probe questions from a summary alone (reader model), and judge the answers (judge model).

Reader: one call per question, the summary is the only context. Answers are
asked to be short phrases, as LoCoMo's token F1 expects, and to say "No
information available" (a LoCoMo refusal marker) when the summary does not
say, so adversarial (category 5) questions are scored too.

Judge: the generous CORRECT/WRONG labelling used by Mem0's LoCoMo evaluation
(same topic and meaning counts; other formats of the same date count), one
structured call per question through ``llm.structured.invoke_structured``.

Both are separate from the summarizer under test; pass any model spec
``llm.chat_model.load_chat_model`` accepts.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from llm.chat_model import with_output_cap
from llm.structured import invoke_structured
from core.errors import ModelOutputError

__all__ = ["JudgeVerdict", "READER_MAX_TOKENS", "READER_REFUSAL", "answer_from_summary", "answer_all", "judge_answer", "judge_all"]

READER_REFUSAL = "No information available"
#: Output cap of a reader answer: a short phrase is asked for, and a small local model that
#: ignores that (or loops) would otherwise generate until its context is full.
READER_MAX_TOKENS = 64

READER_SYSTEM = (
    "You answer questions about an earlier conversation using ONLY the memory summary given to you. "
    "Answer with a short phrase (a few words: a name, a date, a place, a short list), not a full sentence. "
    "Resolve relative times (\"last year\", \"yesterday\") with the session dates in the summary when they are there. "
    f"If the summary does not contain the answer, reply exactly: {READER_REFUSAL}"
)

JUDGE_SYSTEM = (
    "Your task is to label an answer to a question as CORRECT or WRONG. You get a question, the gold "
    "(ground truth) answer and a generated answer. Be generous: if the generated answer refers to the same "
    "thing as the gold answer, even in other words or with extra detail, it is CORRECT. For questions about "
    "time, the same date or period in another format (\"May 7th\" vs \"7 May\") is CORRECT. An answer that "
    "misses the point of the gold answer, contradicts it, or says the information is not available is WRONG."
)


class JudgeVerdict(BaseModel):
    max_output_tokens: ClassVar[int] = 200

    reasoning: str = Field(description="One short sentence explaining the label.")
    label: Literal["CORRECT", "WRONG"]


async def answer_from_summary(model: BaseChatModel, summary: str, question: str) -> str:
    body = f"<summary>\n{summary or '(empty summary)'}\n</summary>\n\nQuestion: {question}"
    reply = await with_output_cap(model, READER_MAX_TOKENS).ainvoke([SystemMessage(READER_SYSTEM), HumanMessage(body)])
    return reply.text.strip()


async def judge_answer(model: BaseChatModel, question: str, gold: str, answer: str) -> float:
    """1.0 for CORRECT, 0.0 for WRONG (also when the judge's output stays invalid)."""
    body = f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}"
    try:
        result = await invoke_structured(model, JudgeVerdict, [SystemMessage(JUDGE_SYSTEM), HumanMessage(body)])
    except ModelOutputError:
        return 0.0
    return 1.0 if result.value.label == "CORRECT" else 0.0


async def _bounded(limit: asyncio.Semaphore, coro):
    async with limit:
        return await coro


async def answer_all(model: BaseChatModel, summary: str, questions: list[str], concurrency: int = 8) -> list[str]:
    limit = asyncio.Semaphore(max(1, concurrency))
    return list(await asyncio.gather(*(_bounded(limit, answer_from_summary(model, summary, q)) for q in questions)))


async def judge_all(
    model: BaseChatModel, items: list[tuple[str, str, str]], concurrency: int = 8
) -> list[float]:
    """Judge ``(question, gold, answer)`` triples."""
    limit = asyncio.Semaphore(max(1, concurrency))
    return list(await asyncio.gather(*(_bounded(limit, judge_answer(model, q, g, a)) for q, g, a in items)))
