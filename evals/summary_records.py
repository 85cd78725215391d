"""JSON contracts of the summaries eval: what a LangSmith example holds and what the target returns.

The same shapes are used with and without LangSmith: ``SummaryReference`` is an
example's reference outputs, ``SummaryOutput`` the target's outputs, and the
evaluators read both back through these models.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from evals.datasets.schema import Conversation

__all__ = ["FoldOutput", "ProbeAnswer", "ProbeRecord", "SummaryOutput", "SummaryReference", "reference_of"]


class ProbeRecord(BaseModel):
    question_id: str
    question: str
    answer: str  # gold
    category: int


class ProbeAnswer(BaseModel):
    question_id: str
    answer: str  # the reader's answer from the summary alone


class FoldOutput(BaseModel):
    index: int
    after_message: int
    node_seconds: float
    model_seconds: float
    calls: int
    input_tokens: int
    output_tokens: int
    closing: bool = False
    board: dict[str, Any]


class SummaryOutput(BaseModel):
    conversation_id: str
    variant: str
    model: str
    summary: str  # the final board, rendered as the reply prompt shows it
    board: dict[str, Any]
    folds: list[FoldOutput] = Field(default_factory=list)
    messages: int
    conversation_tokens: int
    node_runs: int
    calls_by_kind: dict[str, int] = Field(default_factory=dict)
    input_tokens: int = 0  # all calls of the summarize node (fold, recompress, title)
    output_tokens: int = 0
    usage_reported: bool = True  # False: token counts are estimates (~4 chars a token)
    wall_seconds: float
    errors: list[str] = Field(default_factory=list)
    reader_model: str | None = None
    answers: list[ProbeAnswer] | None = None  # None without a reader model


class SummaryReference(BaseModel):
    source: str
    probes: list[ProbeRecord] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)  # reference summaries of the whole conversation


def reference_of(conversation: Conversation, max_probes: int | None = None) -> SummaryReference:
    """Probes and reference summaries of one conversation.

    References: the conversation's own whole-conversation summaries (builtin,
    DialogSum); else LoCoMo's per-session summaries joined in session order
    (our summary covers the whole conversation, so it is compared with all of them).
    """
    probes = [
        ProbeRecord(
            question_id=p.question_id or f"{conversation.id}-q{i}",
            question=p.question,
            answer=p.answer,
            category=p.category,
        )
        for i, p in enumerate(conversation.probes)
    ]
    if max_probes is not None:
        probes = probes[:max_probes]
    references = list(conversation.reference_summaries)
    if not references and conversation.session_summaries:
        references = ["\n".join(conversation.session_summaries[k] for k in sorted(conversation.session_summaries))]
    return SummaryReference(source=conversation.source, probes=probes, references=references)
