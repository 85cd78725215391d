"""Choosing which memories go into the prompt.

Facts are ranked in SQL by ``storage.vector_search.rank_memories`` (its docstring holds the
formula, written once) with the weights below: 0.6 similarity, 0.25 importance, 0.15 recency
with a 30-day half-life.

The top ``max_facts`` (default 7) go in; at least 3 when the user has 3 facts, and
beyond 3 only facts whose similarity clears ``min_similarity``. Open tasks go in
when they relate to the message (or the message is about tasks); summaries of the
user's other chats go in when they clearly relate (similarity ≥ 0.5) and the user stated something
in them (a chat of the user's questions alone, such as the same question asked before, is not
evidence: ``ChatRecord.user_statements``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime

from langgraph.store.base import SearchItem

from core.contracts import LoadedContext, RankedFact, RelatedChat, TaskLine
from core.namespaces import facts_ns
from core.schemas import IMPORTANCE_WEIGHT, Fact, utcnow
from embeddings.calibration import CALIBRATED
from storage import vector_search
from storage.memory_store import memory_store
from memory.user_memory import parse_item, get_user_document, stored_tasks, search_chat_summaries, search_tasks

W_SIMILARITY, W_IMPORTANCE, W_RECENCY = 0.6, 0.25, 0.15
RECENCY_HALF_LIFE_DAYS = 30.0
MIN_FACTS, MIN_SIMILARITY = 3, CALIBRATED.fact_recall
# Facts ranked per turn at most: the nearest by similarity (a bounded set, so cost stays flat).
CANDIDATES = 50
RELATED_CHAT_SIMILARITY = CALIBRATED.related_chat
TASK_SIMILARITY = CALIBRATED.task_recall
TASK_WORDS = re.compile(r"\b(task|tasks|todo|to-do|remind|reminder|plan|list)\b", re.I)


WEIGHTS = vector_search.ScoreWeights(W_SIMILARITY, W_IMPORTANCE, W_RECENCY, RECENCY_HALF_LIFE_DAYS, dict(IMPORTANCE_WEIGHT))


def _parsed_with(items: list[SearchItem]) -> list[tuple[Fact | None, float]]:
    """Each item as a Fact (None when it does not validate), kept in step with its row."""
    return [(parse_item("facts", i), float(i.score or 0.0)) for i in items]


@dataclass
class ScoredFact:
    fact: Fact
    similarity: float
    score: float


async def rank_facts(store, user_id: str, query: str, *, max_facts: int = 7, now: datetime | None = None) -> list[ScoredFact]:
    """The best facts for ``query``: the most similar CANDIDATES, re-ranked by the score.

    Bounded whatever the user has stored: a user with fewer facts than CANDIDATES has all of them ranked.
    """
    now = now or utcnow()
    candidates = max(CANDIDATES, max_facts * 3)
    if not query.strip():
        return []
    ours = memory_store(store)
    # In SQL: the nearest candidates of this user's facts, scored there (storage.vector_search);
    # the message is embedded only when the user has facts.
    ranked = await vector_search.rank_memories(
        ours.conn, facts_ns(user_id), ours.embeddings.aembed_query(query), now=now, weights=WEIGHTS, candidates=candidates, limit=candidates, filter={"status": "active"}
    )
    items = [SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, score=r.similarity) for r in ranked]
    scored = [ScoredFact(f, s, r.score) for (f, s), r in zip(_parsed_with(items), ranked) if f is not None]
    scored.sort(key=lambda s: (-s.score, s.fact.created_at))
    chosen = scored[:MIN_FACTS] + [s for s in scored[MIN_FACTS:] if s.similarity >= MIN_SIMILARITY]
    return chosen[:max_facts]


async def load_user_context(
    store, user_id: str, query: str, *, thread_id: str | None = None, max_facts: int = 7
) -> LoadedContext:
    """Everything load_context puts in the turn but the excerpts, as JSON-friendly dicts (shown in Studio). It only
    reads: extract_memories marks the facts used after the reply (``memory.writer.extraction.mark_used``)."""
    now = utcnow()
    # The searches embed the message only when there is something to search (a new user has
    # nothing: no vector before the first token); at once they share one (embeddings.cache).
    doc, open_tasks, ranked, similar_chats = await asyncio.gather(
        get_user_document(store, user_id),
        stored_tasks(store, user_id, newest=10),
        rank_facts(store, user_id, query, max_facts=max_facts, now=now),
        search_chat_summaries(store, user_id, query, limit=5),
    )
    # A few open tasks always show; more only when they relate to the message (or it is about tasks).
    similar_tasks = None if TASK_WORDS.search(query) or len(open_tasks) <= 3 else await search_tasks(store, user_id, query, limit=10)
    if similar_tasks is None:
        tasks = open_tasks
    else:
        tasks = [t for t, s in similar_tasks if s >= TASK_SIMILARITY and t.status in ("open", "in_progress")][:5]

    # A chat where the user only asked (the same question, maybe) is no evidence: not offered.
    chats = [(c, s) for c, s in similar_chats if c.thread_id != thread_id and s >= RELATED_CHAT_SIMILARITY and c.user_statements != 0][:2]
    return LoadedContext(
        profile=doc.profile.model_dump(mode="json"),
        preferences=doc.preferences.model_dump(mode="json"),
        facts=[
            RankedFact(id=s.fact.id, text=s.fact.text, importance=s.fact.importance, similarity=round(s.similarity, 3), score=round(s.score, 3))
            for s in ranked
        ],
        tasks=[TaskLine(id=t.id, description=t.description, status=t.status, due=t.due, due_date=t.due_date) for t in tasks],
        related_chats=[
            RelatedChat(thread_id=c.thread_id, title=c.title, summary_snippet=c.summary_text[:300], similarity=round(s, 3)) for c, s in chats
        ],
    )
