"""ROUGE-1, ROUGE-2 and ROUGE-L, implemented here (no ``rouge-score`` dependency).

Tokenisation follows Google's ``rouge-score`` ``DefaultTokenizer``: lowercase,
replace every run of characters outside ``[a-z0-9]`` with a space, split, and,
when stemming (the default here), Porter-stem only tokens longer than 3
characters. ROUGE-N counts clipped n-gram overlaps; ROUGE-L uses the longest
common subsequence of the two token lists (sentence-level ROUGE-L, not
ROUGE-Lsum). Precision is relative to the prediction, recall to the reference,
F = 2PR / (P + R) (0 when both are 0).

Multi-reference: for each ROUGE type the reference with the highest
F-measure wins (as ``RougeScorer.score_multi`` does).

Argument order is ``(prediction, reference)``; note ``rouge-score`` uses
``score(target, prediction)``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from nltk.stem import PorterStemmer

__all__ = [
    "RougeScore",
    "ROUGE_TYPES",
    "rouge_tokenize",
    "rouge_n",
    "rouge_l",
    "rouge_scores",
]

ROUGE_TYPES: tuple[str, ...] = ("rouge1", "rouge2", "rougeL")

_NON_ALNUM_RE = re.compile(r"[^a-z0-9]+")
_STEMMER = PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(token: str) -> str:
    return _STEMMER.stem(token)


@dataclass(frozen=True)
class RougeScore:
    precision: float
    recall: float
    fmeasure: float

    @classmethod
    def from_counts(cls, overlap: int, pred_total: int, ref_total: int) -> RougeScore:
        precision = overlap / pred_total if pred_total else 0.0
        recall = overlap / ref_total if ref_total else 0.0
        f = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return cls(precision, recall, f)


def rouge_tokenize(text: str, stem: bool = True) -> list[str]:
    """Tokenise like ``rouge-score``'s default tokenizer."""
    tokens = _NON_ALNUM_RE.sub(" ", str(text).lower()).split()
    if stem:
        tokens = [_stem(t) if len(t) > 3 else t for t in tokens]
    return [t for t in tokens if t]


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _rouge_n_tokens(pred: Sequence[str], ref: Sequence[str], n: int) -> RougeScore:
    p, r = _ngrams(pred, n), _ngrams(ref, n)
    overlap = sum((p & r).values())
    return RougeScore.from_counts(overlap, sum(p.values()), sum(r.values()))


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    if not a or not b:
        return 0
    if len(b) > len(a):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = prev[j - 1] + 1 if x == y else (prev[j] if prev[j] > cur[j - 1] else cur[j - 1])
        prev = cur
    return prev[-1]


def _rouge_l_tokens(pred: Sequence[str], ref: Sequence[str]) -> RougeScore:
    return RougeScore.from_counts(_lcs_length(pred, ref), len(pred), len(ref))


def rouge_n(prediction: str, reference: str, n: int, stem: bool = True) -> RougeScore:
    """ROUGE-N of one prediction against one reference."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return _rouge_n_tokens(rouge_tokenize(prediction, stem), rouge_tokenize(reference, stem), n)


def rouge_l(prediction: str, reference: str, stem: bool = True) -> RougeScore:
    """Sentence-level ROUGE-L (LCS) of one prediction against one reference."""
    return _rouge_l_tokens(rouge_tokenize(prediction, stem), rouge_tokenize(reference, stem))


def rouge_scores(
    prediction: str,
    references: str | Iterable[str],
    types: Sequence[str] = ROUGE_TYPES,
    stem: bool = True,
) -> dict[str, RougeScore]:
    """ROUGE scores keyed by type (``rouge1``, ``rouge2``, ..., ``rougeL``).

    ``references`` may be one string or several; with several, each type
    keeps the reference with the best F-measure. Raises ``ValueError`` when
    no reference is given.
    """
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise ValueError("at least one reference is needed")
    pred_tokens = rouge_tokenize(prediction, stem)
    ref_tokens = [rouge_tokenize(r, stem) for r in refs]
    out: dict[str, RougeScore] = {}
    for rtype in types:
        if rtype == "rougeL":
            scores = [_rouge_l_tokens(pred_tokens, rt) for rt in ref_tokens]
        else:
            m = re.fullmatch(r"rouge(\d+)", rtype)
            if not m:
                raise ValueError(f"unknown ROUGE type {rtype!r}; use rouge1, rouge2, ..., rougeL")
            n = int(m.group(1))
            scores = [_rouge_n_tokens(pred_tokens, rt, n) for rt in ref_tokens]
        out[rtype] = max(scores, key=lambda s: s.fmeasure)
    return out
