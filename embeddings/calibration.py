"""Similarity thresholds, one row per embedding model: every cosine floor the agent compares with.

A cosine of 0.5 means "clearly related" for all-MiniLM-L6-v2 and something else for another
model, so the floors live here, keyed by the model, and the matchers read theirs from
:data:`CALIBRATED` (the row of the model the process is configured with: ``$MEMORY_AGENT_EMBEDDINGS``
or the default, as :func:`embeddings.resolve_embeddings` reads it). A model without a row gets
all-MiniLM-L6-v2's, with a warning: calibrate it and add its row (docs/episodic-memory.md and
``memory-agent eval retrieval --calibrate`` say how the MiniLM figures were found).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields

from embeddings.resolution import DEFAULT_EMBEDDINGS_SPEC, ENV_EMBEDDINGS

log = logging.getLogger(__name__)

MINILM = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Thresholds:
    """Cosine similarities (scores, where said) at or above which a matcher acts."""

    # memory/writer/merge_rules.py: the writer's sameness of memories
    fact_merge: float  # a new fact is the stored one (merged)
    task_match: float  # a task update is about an open task
    task_duplicate: float  # a new task repeats an open one (also the add tool's check)
    # memory/recall.py: what reaches the reply prompt
    fact_recall: float  # facts beyond the first few
    task_recall: float  # open tasks
    related_chat: float  # another chat's summary
    # memory/forgetting.py: a fact found by meaning alone for a forget request
    forget_match: float
    # memory/chat_search.py: finding a chat by what it was about
    chat_candidate: float  # similarity a chat needs to be a candidate
    chat_clear_score: float  # blended score (mostly similarity) of one clear match
    chat_clear_margin: float  # ... and its lead over the next
    # memory/episodes.py: the episodic index's relevance gate and small talk
    episode_min_similarity: float
    episode_min_similarity_covered: float  # with half the query's weighted words
    episode_floor_similarity: float  # the others, once one message cleared the gate
    episode_min_similarity_in_span: float  # a question naming a span no message cleared the gate for: one said in it
    small_talk: float  # a message this close to a greeting gets no excerpts
    # knowledge/hybrid_ranking.py: the knowledge base's relevance gate and MMR
    knowledge_min_similarity: float
    knowledge_min_similarity_text_match: float
    knowledge_min_similarity_covered: float
    knowledge_duplicate: float  # a chunk this close to a chosen one is never picked


THRESHOLDS: dict[str, Thresholds] = {
    MINILM: Thresholds(
        fact_merge=0.9,
        task_match=0.75,
        task_duplicate=0.92,
        fact_recall=0.25,
        task_recall=0.3,
        related_chat=0.5,
        forget_match=0.55,
        chat_candidate=0.2,
        chat_clear_score=0.45,
        chat_clear_margin=0.1,
        episode_min_similarity=0.47,
        episode_min_similarity_covered=0.25,
        episode_floor_similarity=0.25,
        episode_min_similarity_in_span=0.35,
        small_talk=0.7,
        knowledge_min_similarity=0.38,
        knowledge_min_similarity_text_match=0.34,
        knowledge_min_similarity_covered=0.13,
        knowledge_duplicate=0.95,
    ),
}
FIELDS = tuple(f.name for f in fields(Thresholds))


def model_of(name: str) -> str:
    """The model a spec or name names: ``local:all-MiniLM-L6-v2``,
    ``sentence-transformers/all-MiniLM-L6-v2`` -> ``all-MiniLM-L6-v2`` (as ``EmbeddingsInfo.name``)."""
    return name.strip().rsplit(":", 1)[-1].rsplit("/", 1)[-1]


def thresholds_for(name: str) -> Thresholds:
    """The row of the model ``name`` names; MiniLM's, with a warning, for a model without one."""
    model = model_of(name).casefold()
    for key, row in THRESHOLDS.items():
        if key.casefold() == model:
            return row
    log.warning("no similarity thresholds calibrated for embeddings %r: using %s's (embeddings/calibration.py)", name, MINILM)
    return THRESHOLDS[MINILM]


def configured_model() -> str:
    return (os.environ.get(ENV_EMBEDDINGS) or DEFAULT_EMBEDDINGS_SPEC).strip()


CALIBRATED = thresholds_for(configured_model())
