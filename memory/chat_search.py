"""Finding "the chat about …": chat summaries ranked by similarity and recency.

    score = 0.8 · similarity + 0.2 · recency,   recency = 0.5 ^ (age_days / 14)

- similarity: cosine (0..1) between the query and the chat's searchable summary
  (its summary board plus its latest user lines), from pgvector via the store;
- age_days: days since the chat's last activity, so a chat from today gets the full
  0.2 and one from two weeks ago 0.1.

Only chats with similarity ≥ ``MIN_SIMILARITY`` are candidates. The answer is *one*
clear match when the best score is ≥ ``CLEAR_SCORE`` and leads the next candidate by
≥ ``CLEAR_MARGIN``; otherwise *several* candidates with their scores, so the client
can ask which one was meant; or *none*.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from core.schemas import ChatRecord, utcnow
from memory.chat_admin import owned_ids
from memory.user_memory import age_days, search_chats

W_SIMILARITY, W_RECENCY = 0.8, 0.2
RECENCY_HALF_LIFE_DAYS = 14.0
MIN_SIMILARITY = 0.2
CLEAR_SCORE = 0.55
CLEAR_MARGIN = 0.1
MAX_CANDIDATES = 5
FORMULA = (
    f"score = {W_SIMILARITY}·similarity + {W_RECENCY}·recency, recency = 0.5^(age_days/{RECENCY_HALF_LIFE_DAYS:g}); "
    f"one clear match when the top score ≥ {CLEAR_SCORE} and ≥ {CLEAR_MARGIN} above the next, "
    f"candidates need similarity ≥ {MIN_SIMILARITY}"
)


@dataclass(frozen=True)
class RankedChat:
    chat: ChatRecord
    similarity: float
    recency: float
    score: float


@dataclass(frozen=True)
class ChatSearch:
    outcome: Literal["one", "several", "none"]
    candidates: list[RankedChat]

    @property
    def match(self) -> RankedChat | None:
        return self.candidates[0] if self.outcome == "one" else None


def recency(last_activity: datetime, now: datetime) -> float:
    return 0.5 ** (age_days(last_activity, now) / RECENCY_HALF_LIFE_DAYS)


def rank(hits: list[tuple[ChatRecord, float]], now: datetime) -> list[RankedChat]:
    ranked = []
    for chat, similarity in hits:
        r = recency(chat.last_activity, now)
        ranked.append(RankedChat(chat, round(similarity, 4), round(r, 4), round(W_SIMILARITY * similarity + W_RECENCY * r, 4)))
    return sorted(ranked, key=lambda c: -c.score)


def decide(ranked: list[RankedChat]) -> ChatSearch:
    candidates = [c for c in ranked if c.similarity >= MIN_SIMILARITY][:MAX_CANDIDATES]
    if not candidates:
        return ChatSearch("none", [])
    top = candidates[0]
    runner_up = candidates[1].score if len(candidates) > 1 else 0.0
    if top.score >= CLEAR_SCORE and top.score - runner_up >= CLEAR_MARGIN:
        return ChatSearch("one", candidates)
    return ChatSearch("several", candidates)


async def find_chat(store, user_id: str, query: str, *, now: datetime | None = None) -> ChatSearch:
    hits = await search_chats(store, user_id, query, limit=20)
    mine = await owned_ids(store, user_id, (c.thread_id for c, _ in hits))
    hits = [(c, s) for c, s in hits if c.thread_id in mine]
    return decide(rank(hits, now or utcnow()))
