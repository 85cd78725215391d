"""JSON contracts of the extraction eval: an example's reference outputs and the target's outputs."""

from __future__ import annotations

from pydantic import BaseModel, Field

from evals.conversation_replay import subject_name
from evals.datasets.schema import Conversation

__all__ = ["ExtractionOutput", "ExtractionReference", "GoldFactRecord", "SpeakerOutput", "extraction_reference", "speakers_to_replay"]


class GoldFactRecord(BaseModel):
    text: str
    turn_id: str | None = None


class ExtractionReference(BaseModel):
    source: str
    gold: dict[str, list[GoldFactRecord]] = Field(default_factory=dict)  # speaker -> facts
    subjects: dict[str, str | None] = Field(default_factory=dict)  # speaker -> the name facts use


class SpeakerOutput(BaseModel):
    speaker: str
    memories: list[str]
    replayed_turn_ids: list[str]
    node_runs: int
    writer: dict[str, int] = Field(default_factory=dict)
    failures: list[str] = Field(default_factory=list)


class ExtractionOutput(BaseModel):
    conversation_id: str
    model: str
    speakers: list[SpeakerOutput]
    calls: int
    input_tokens: int
    output_tokens: int
    usage_reported: bool = True
    wall_seconds: float


def speakers_to_replay(conversation: Conversation, first_only: bool = False) -> list[str]:
    """Speakers with gold facts, in order of appearance (just the first with ``first_only``)."""
    with_facts = {f.speaker for f in conversation.gold_facts if f.speaker}
    ordered = [s for s in conversation.speakers if s in with_facts]
    return ordered[:1] if first_only else ordered


def extraction_reference(conversation: Conversation, speakers: list[str]) -> ExtractionReference:
    return ExtractionReference(
        source=conversation.source,
        gold={s: [GoldFactRecord(text=f.text, turn_id=f.turn_id) for f in conversation.facts_for(speaker=s)] for s in speakers},
        subjects={s: subject_name(conversation, s) for s in speakers},
    )
