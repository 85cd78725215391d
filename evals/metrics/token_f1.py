"""LoCoMo-style token F1, reproducing LoCoMo's own QA scorer.

Reference: ``task_eval/evaluation.py`` in snap-research/locomo
(``normalize_answer``, ``f1_score``, ``f1`` and ``eval_question_answering``).
What that scorer does, and therefore what this module does:

* ``normalize_answer``: delete commas, lowercase, delete ASCII punctuation
  (``string.punctuation``), delete the words ``a``, ``an``, ``the`` **and
  ``and``** (LoCoMo's ``remove_articles`` also removes "and"), collapse
  whitespace.
* every token is then stemmed with NLTK's ``PorterStemmer()`` (default mode).
* ``f1``: bag-of-tokens F1 (``Counter`` intersection); 0.0 when nothing
  overlaps (which also covers an empty prediction or an empty gold answer).
* ``f1_multi_answer`` (category 1): split prediction and gold on commas
  *before* normalising; for each gold part take the best F1 over the
  prediction parts; average over the gold parts.
* ``score_qa`` dispatch, as in ``eval_question_answering``:

  - the gold answer is ``str()``-ed first (LoCoMo has integer answers);
  - category 3: only the part of the gold answer before the first ``;`` is
    kept (LoCoMo cat-3 answers look like "Likely no; she wants to ...");
  - categories 2, 3, 4: plain ``f1``;
  - category 1: ``f1_multi_answer``;
  - category 5 (adversarial): 1.0 if the lowercased prediction contains
    "no information available" or "not mentioned", else 0.0. The gold answer
    is ignored. Pass ``refusal_markers=EXTENDED_REFUSAL_MARKERS`` for a more
    lenient (non-LoCoMo) refusal check;
  - category 0 is *our* extension for free-form probes that are not LoCoMo
    questions (e.g. QMSum queries): plain ``f1``.

Numbers produced here are comparable to LoCoMo's published F1, not to the
LLM-judge ("J") numbers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from nltk.stem import PorterStemmer

__all__ = [
    "LOCOMO_REFUSAL_MARKERS",
    "EXTENDED_REFUSAL_MARKERS",
    "normalize_answer",
    "answer_tokens",
    "stem_token",
    "f1",
    "f1_multi_answer",
    "is_refusal",
    "score_qa",
]

#: The two phrases LoCoMo's scorer accepts as a refusal for category 5.
LOCOMO_REFUSAL_MARKERS: tuple[str, ...] = ("no information available", "not mentioned")

#: A more lenient list (not LoCoMo's): use only when reporting it as such.
EXTENDED_REFUSAL_MARKERS: tuple[str, ...] = LOCOMO_REFUSAL_MARKERS + (
    "not discussed",
    "no information",
    "not stated",
    "not specified",
    "never mentioned",
    "does not mention",
    "doesn't mention",
    "did not mention",
    "didn't mention",
    "no mention",
    "not in the conversation",
    "i don't know",
    "i do not know",
    "unknown",
    "cannot be determined",
    "can't be determined",
)

_PUNCT = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the|and)\b")
_STEMMER = PorterStemmer()


@lru_cache(maxsize=65536)
def stem_token(token: str) -> str:
    """Porter-stem one token (NLTK default mode, as LoCoMo), cached."""
    return _STEMMER.stem(token)


def normalize_answer(text: str) -> str:
    """LoCoMo's ``normalize_answer`` (no stemming)."""
    text = str(text).replace(",", "")
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str, *, stem: bool = True) -> list[str]:
    """Normalised (and by default Porter-stemmed) tokens, as LoCoMo's F1 sees them."""
    tokens = normalize_answer(text).split()
    return [stem_token(t) for t in tokens] if stem else tokens


def _f1_tokens(pred: list[str], gold: list[str]) -> float:
    common = Counter(pred) & Counter(gold)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, ground_truth: str) -> float:
    """LoCoMo ``f1_score``: stemmed bag-of-tokens F1 in [0, 1]."""
    return _f1_tokens(answer_tokens(str(prediction)), answer_tokens(str(ground_truth)))


def f1_multi_answer(prediction: str, ground_truth: str) -> float:
    """LoCoMo ``f1`` for category 1 (multi-answer, comma separated).

    Mean over the gold's comma-separated parts of the best F1 against any
    comma-separated part of the prediction.
    """
    predictions = [p.strip() for p in str(prediction).split(",")]
    ground_truths = [g.strip() for g in str(ground_truth).split(",")]
    scores = [max(f1(p, g) for p in predictions) for g in ground_truths]
    return sum(scores) / len(scores)


def is_refusal(prediction: str, markers: Sequence[str] = LOCOMO_REFUSAL_MARKERS) -> bool:
    """True when the lowercased prediction contains one of ``markers``."""
    low = str(prediction).lower()
    return any(m in low for m in markers)


def score_qa(
    prediction: str,
    answer: str | int | float,
    category: int,
    *,
    refusal_markers: Sequence[str] = LOCOMO_REFUSAL_MARKERS,
) -> float:
    """Score one answer the way LoCoMo's ``eval_question_answering`` does.

    See the module docstring for the per-category rules. Raises
    ``ValueError`` for a category outside 0-5.
    """
    category = int(category)
    prediction = "" if prediction is None else str(prediction)
    gold = "" if answer is None else str(answer)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category in (0, 2, 3, 4):
        return f1(prediction, gold)
    if category == 1:
        return f1_multi_answer(prediction, gold)
    if category == 5:
        return 1.0 if is_refusal(prediction, refusal_markers) else 0.0
    raise ValueError(f"unknown QA category {category!r}; expected 0-5 (LoCoMo 1-5, 0 = free-form)")
