"""What the tokens eval measures, per turn, per conversation and in all (its report and files read these)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["ANCHOR", "ConversationTokens", "TokenResults", "TurnTokens", "headline"]

ANCHOR = (
    "Published anchor: on LoCoMo, Mem0 reports ~1.8k tokens per query with its memory against ~26k tokens "
    "for the full conversation (about 93% fewer), at 66.9 vs 72.9 LLM-judge accuracy (Mem0 paper, 2025)."
)


class TurnTokens(BaseModel):
    conversation: str
    turn: int
    sent: int  # prompt_tokens_estimated
    model_input: int  # the model's reported input tokens for the turn (all reply calls)
    full: int
    summarized: bool  # a summary existed when this turn's prompt was built
    refused: str | None = None


class ConversationTokens(BaseModel):
    conversation: str
    turns: int
    sent_total: int
    model_input_total: int
    full_total: int
    saved: float  # 1 - sent_total / full_total
    last_sent: int
    last_full: int
    folds: int
    facts_active: int = 0  # long-term facts stored for the replayed user at the end
    facts_superseded: int = 0
    tasks: int = 0


class TokenResults(BaseModel):
    command: str = "tokens"
    dataset: str
    model: str
    settings: dict = Field(default_factory=dict)
    conversations: list[ConversationTokens]
    turns: list[TurnTokens]
    sent_total: int
    full_total: int
    saved: float
    mean_sent: float
    mean_full: float
    notes: list[str] = Field(default_factory=list)
    started_at: str
    wall_seconds: float


def headline(results: TokenResults) -> str:
    return (
        f"{results.saved:.1%} of prompt tokens saved: the graph sent {results.sent_total:,} tokens over "
        f"{len(results.turns)} turns where the full history would need {results.full_total:,} "
        f"(mean {results.mean_sent:,.0f} vs {results.mean_full:,.0f} per turn)."
    )
