"""Pure ranking functions for hybrid retrieval: reciprocal rank fusion and MMR.

* :func:`reciprocal_rank_fusion` merges ranked lists (vector search, full-text search)
  without having to compare their incomparable scores: each list contributes
  ``1 / (k + rank)`` for every item it ranks (Cormack et al., 2009; k = 60).
* :func:`mmr_select` picks a diverse subset (maximal marginal relevance): each step
  takes the candidate maximizing ``λ·relevance − (1−λ)·max cosine similarity to the
  already picked ones``. Candidates that are near-duplicates of a picked one (cosine ≥
  ``duplicate_threshold``) are never picked: plain MMR with λ = 0.7 still lets an exact
  copy of the best chunk beat a merely good, different one. A token budget is respected
  by skipping candidates that no longer fit.
* :class:`RelevanceGate` decides which fused candidates may reach the prompt at all: RRF
  and MMR only order candidates, and the best of an unrelated lot is still unrelated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence, TypeVar

import numpy as np

from embeddings.calibration import CALIBRATED

K = TypeVar("K", bound=Hashable)

RRF_K = 60


@dataclass(frozen=True)
class RelevanceGate:
    """Which candidates are related to the query at all (a chunk failing it never reaches the prompt).

    A candidate passes when

    * its cosine similarity to the query is at least ``min_similarity``: similar enough on its
      own, with no word in common; or
    * it matches the query's words in full text (any content word) and its similarity is
      at least ``min_similarity_text_match``: shared words are weak evidence alone (a chat
      about dinner shares "ideas" with a README) but they vouch for a middling similarity; or
    * it holds at least ``min_coverage`` of the query's content words, each weighed by its
      rarity in the searched chunks (``coverage``, idf-weighted), and its similarity is at
      least ``min_similarity_covered``: most of a question's distinctive words in one chunk is
      strong evidence for a chunk that embeds poorly (a settings table, a "to change X, go to
      Y" table), but not alone: a chunk can quote a whole unrelated question, and then the vectors
      disagree; or
    * the query is a lookup of at most three content words and the chunk holds every one of them
      (``whole_match``): a product code or a term looked up on its own ("XR-2291-B", "scontrino"),
      which embeds poorly. (A longer question must be similar: its words can all appear in a
      chunk that merely quotes it.)

    The three similarity floors are calibrated for all-MiniLM-L6-v2 by ``memory-agent eval
    retrieval --calibrate`` on the calibration half of ``evals/data/retrieval_queries.json`` (the
    figures and the held-out half are in the README); ``min_coverage`` (half the question's
    weight) is a design choice, not fitted. Another embedding model has another scale of
    cosines: calibrate again for it (its row in embeddings/calibration.py).
    """

    min_similarity: float = CALIBRATED.knowledge_min_similarity
    min_similarity_text_match: float = CALIBRATED.knowledge_min_similarity_text_match
    min_similarity_covered: float = CALIBRATED.knowledge_min_similarity_covered
    min_coverage: float = 0.5

    def admits(self, similarity: float | None, *, text_match: bool, whole_match: bool, coverage: float = 0.0) -> bool:
        if whole_match:
            return True
        if similarity is None:  # a chunk without a vector (mid-reindex): only words can vouch for it
            return False
        return (
            similarity >= self.min_similarity
            or (text_match and similarity >= self.min_similarity_text_match)
            or (text_match and coverage >= self.min_coverage and similarity >= self.min_similarity_covered)
        )


RELEVANCE_GATE = RelevanceGate()


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]],
    *,
    k: int = RRF_K,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked lists of ids (best first) into one: ``[(id, score), ...]`` best first.

    An id's score is ``Σ weight / (k + rank)`` over the lists that contain it (rank is
    1-based; a repeated id counts at its best rank). Ties keep the order of first
    appearance (earlier lists, then earlier ranks), so the result is deterministic.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking is needed")
    scores: dict[K, float] = {}
    first_seen: dict[K, int] = {}
    for list_no, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else float(weights[list_no])
        seen_here: set[K] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen_here:
                continue
            seen_here.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            first_seen.setdefault(item, len(first_seen))
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError("candidate vectors must be a 2-D array (one row per candidate)")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def mmr_select(
    vectors: np.ndarray | Sequence[Sequence[float]],
    relevance: Sequence[float],
    *,
    k: int,
    lambda_mult: float = 0.7,
    token_costs: Sequence[int] | None = None,
    token_budget: int | None = None,
    duplicate_threshold: float = CALIBRATED.knowledge_duplicate,
) -> list[int]:
    """Indices of the chosen candidates, in the order chosen (most relevant first).

    ``vectors[i]`` is candidate i's embedding, ``relevance[i]`` its relevance to the
    query (any scale; it is divided by its maximum). At most ``k`` are chosen; with a
    ``token_budget`` the chosen ``token_costs`` sum to at most the budget (a candidate
    that does not fit is skipped, a smaller later one may still fit).
    """
    n = len(relevance)
    if k <= 0 or n == 0:
        return []
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError("lambda_mult must be between 0 and 1")
    if token_costs is not None and len(token_costs) != n:
        raise ValueError("one token cost per candidate is needed")
    units = _unit_rows(np.asarray(vectors))
    if units.shape[0] != n:
        raise ValueError("one vector per candidate is needed")
    rel = np.asarray(relevance, dtype=np.float64)
    top = rel.max()
    if top > 0:
        rel = rel / top
    similarity = units @ units.T

    remaining_budget = float("inf") if token_budget is None else float(token_budget)
    costs = np.zeros(n) if token_costs is None else np.asarray(token_costs, dtype=np.float64)
    available = np.ones(n, dtype=bool)
    max_sim = np.full(n, -np.inf)  # max similarity to the chosen ones
    chosen: list[int] = []
    while len(chosen) < k:
        available &= costs <= remaining_budget
        if not available.any():
            break
        redundancy = np.where(np.isfinite(max_sim), max_sim, 0.0)
        score = lambda_mult * rel - (1.0 - lambda_mult) * redundancy
        score[~available] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        available[best] = False
        remaining_budget -= costs[best]
        max_sim = np.maximum(max_sim, similarity[best])
        available &= max_sim < duplicate_threshold
    return chosen


def cosine_similarities(query: Sequence[float] | np.ndarray, vectors: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Cosine similarity of ``query`` with each row of ``vectors``."""
    q = np.asarray(query, dtype=np.float64)
    norm = np.linalg.norm(q)
    if norm:
        q = q / norm
    return _unit_rows(np.asarray(vectors)) @ q


def without_directions(vector: Sequence[float], directions: Iterable[Sequence[float]]) -> list[float]:
    """``vector`` without any part in the span of ``directions`` (made orthonormal first: two
    names' directions are alike, and taking one out after the other would bring part of the first
    back), unit length again; unchanged when nothing of it would be left."""
    q = np.asarray(vector, dtype=np.float64)
    kept = [d for d in (np.asarray(d, dtype=np.float64) for d in directions) if np.linalg.norm(d) > 0]
    if kept:
        basis, _ = np.linalg.qr(np.stack(kept, axis=1))
        q = q - basis @ (basis.T @ q)
    norm = np.linalg.norm(q)
    return (q / norm).tolist() if norm > 1e-6 else list(vector)
