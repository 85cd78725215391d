"""Match extracted memories to gold facts by embedding similarity.

Both sides are embedded with MiniLM (``local:all-MiniLM-L6-v2``, the agent's
default embeddings; the thresholds are calibrated for it) and compared by
cosine similarity:

* one-to-one matching: pairs at or above ``threshold`` are taken greedily,
  most similar first, and each memory and each gold fact is used at most once;
  precision = matched / memories, recall = matched / gold facts. (With
  max-similarity matching one vague memory, "Loves art", could "find" a dozen
  gold facts and inflate recall.)
* *duplicates*: extracted memories whose cosine to an earlier one of the same
  user is at or above ``duplicate_threshold``: the store holds the same thing
  twice (the writer merges only from 0.9 up, and only against what it saw).

Extracted memories say "Lives in Lisbon" (the subject is the user); gold facts
name the person ("Caroline lives in ..."). So the subject's name is put in
front of a memory that does not mention it ("Caroline lives in Lisbon")
before embedding; without that, the same fact scores ~0.2 lower.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FactMatch", "count_duplicates", "match_facts", "with_subject"]


@dataclass(frozen=True)
class FactMatch:
    extracted: int
    gold: int
    matched: int  # one-to-one pairs at or above the threshold

    @property
    def precision(self) -> float | None:
        return self.matched / self.extracted if self.extracted else None

    @property
    def recall(self) -> float | None:
        return self.matched / self.gold if self.gold else None

    @property
    def f1(self) -> float | None:
        if self.gold == 0:
            return None
        p, r = self.precision or 0.0, self.recall or 0.0
        return 2 * p * r / (p + r) if p + r > 0 else 0.0


def with_subject(memory: str, subject: str | None) -> str:
    """``"Lives in Lisbon"`` → ``"Caroline lives in Lisbon"`` unless the memory already names the subject."""
    text = memory.strip()
    # A whole word: the subject "I" (first-person gold facts) is inside almost every memory's letters.
    if not subject or not text or re.search(rf"\b{re.escape(subject)}\b", text, flags=re.IGNORECASE):
        return text
    return f"{subject} {text}"  # MiniLM is uncased: no need to lowercase the verb


def _unit_rows(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float32)
    if m.size == 0:
        return m.reshape(0, 0)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)


def match_facts(extracted_vectors, gold_vectors, threshold: float) -> FactMatch:
    e, g = _unit_rows(extracted_vectors), _unit_rows(gold_vectors)
    if len(e) == 0 or len(g) == 0:
        return FactMatch(len(e), len(g), 0)
    sims = e @ g.T
    rows, cols = np.nonzero(sims >= threshold)
    order = np.argsort(-sims[rows, cols], kind="stable")
    used_e: set[int] = set()
    used_g: set[int] = set()
    for k in order:
        i, j = int(rows[k]), int(cols[k])
        if i not in used_e and j not in used_g:
            used_e.add(i)
            used_g.add(j)
    return FactMatch(extracted=len(e), gold=len(g), matched=len(used_e))


def count_duplicates(vectors, threshold: float) -> int:
    v = _unit_rows(vectors)
    if len(v) < 2:
        return 0
    sims = v @ v.T
    earlier = np.tril(sims, k=-1)  # each memory against the ones before it
    return int((earlier.max(axis=1) >= threshold).sum())
