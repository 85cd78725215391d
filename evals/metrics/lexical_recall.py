"""Lexical recall: how many of a gold answer's content tokens appear in a text.

Used when there is no reader model: instead of asking an LLM to answer from a
retrieved context (or a summary), check whether the context even contains the
words of the gold answer. Both sides go through LoCoMo's ``normalize_answer``
(lowercase, no punctuation, no a/an/the/and) and Porter stemming, then
English stopwords (a small built-in list; NLTK's corpus needs a download) are
dropped from the gold side. The score is the fraction of *distinct* gold
tokens present anywhere in the text (order and counts ignored).

If the gold answer has only stopwords (e.g. "No", "He did") the stopword
filter is skipped so the answer still has tokens; an answer with no tokens at
all scores 0.0.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.stopwords import ENGLISH, without_apostrophes
from .token_f1 import answer_tokens, stem_token

__all__ = ["STOPWORDS", "content_tokens", "lexical_recall", "lexical_recall_multi"]

#: Small English stopword list (lowercase, apostrophes removed like LoCoMo's
#: normaliser does, so "don't" -> "dont").
STOPWORDS: frozenset[str] = without_apostrophes(ENGLISH) | {"also", "just", "s", "t"}


def content_tokens(text: str, *, remove_stopwords: bool = True, stem: bool = True) -> list[str]:
    """Normalised, stemmed tokens of ``text`` without stopwords (order kept, duplicates kept)."""
    raw = answer_tokens(text, stem=False)
    if remove_stopwords:
        kept = [t for t in raw if t not in STOPWORDS]
        raw = kept or raw  # an all-stopword answer ("No") keeps its words
    if stem:
        raw = [stem_token(t) for t in raw]
    return raw


def lexical_recall(gold: str, text: str, *, remove_stopwords: bool = True, stem: bool = True) -> float:
    """Fraction of the gold answer's distinct content tokens found in ``text`` (0..1)."""
    gold_set = set(content_tokens(str(gold), remove_stopwords=remove_stopwords, stem=stem))
    if not gold_set:
        return 0.0
    text_set = set(answer_tokens(str(text), stem=stem))
    return len(gold_set & text_set) / len(gold_set)


def lexical_recall_multi(golds: Iterable[str], text: str, **kwargs: bool) -> float:
    """Best ``lexical_recall`` over several acceptable gold answers (0.0 if none)."""
    return max((lexical_recall(g, text, **kwargs) for g in golds), default=0.0)
