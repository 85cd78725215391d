"""Words of a text as the matchers see them: tokens, stems, content words.

One home for splitting text into words and stemming them (NLTK's Porter stemmer, no corpus
download). New matchers take their words from here; the older ones are listed in
ARCHITECTURE.md's open items until they move.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from nltk.stem import PorterStemmer

from core.stopwords import LOW_CONTENT, STOPWORDS, VAGUE

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_STEMMER = PorterStemmer()


def words(text: str) -> list[str]:
    """The words of ``text``, casefolded and NFKC-normalized, in order (apostrophes kept inside)."""
    return [w.replace("’", "'") for w in _WORD.findall(unicodedata.normalize("NFKC", text).casefold())]


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """One word's Porter stem ("nurses", "nursing" -> "nurs"); words of other scripts unchanged."""
    return _STEMMER.stem(word) if word.isascii() else word


def stems(text: str) -> list[str]:
    return [stem(w) for w in words(text)]


def is_content_word(word: str) -> bool:
    """A word that says what a text is about: not a function word, a vague or everyday chat word."""
    return len(word) > 1 and word not in STOPWORDS and word not in VAGUE and word not in LOW_CONTENT


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if is_content_word(w)]


# --------------------------------------------------------------------------- keyword matching
# Search as the user types it (the MCP and history searches): a term matches the words it starts.
_TYPED_WORD = re.compile(r"\w+")


def query_terms(query: str) -> list[str]:
    """Distinct lower-case words of the query, without stopwords (unless it has nothing else)."""
    # One-letter words would match nearly every message by prefix.
    typed = [w for w in dict.fromkeys(w.casefold() for w in _TYPED_WORD.findall(query)) if len(w) > 1 or w.isdigit()]
    kept = [w for w in typed if w not in STOPWORDS]
    return kept or typed


@dataclass
class KeywordMatch:
    terms: list[str]
    position: int
    """Where the first matching word (or the whole query) starts."""
    score: float


def keyword_match(text: str, terms: Sequence[str], phrase: str) -> KeywordMatch | None:
    """Terms found in ``text``; a term matches the words it starts ('book' finds 'booking').

    Score: share of the terms found, plus 0.25 when the whole query appears as typed.
    """
    if not terms:
        return None
    folded = text.casefold()
    found: list[str] = []
    first = len(text)
    for word in _TYPED_WORD.finditer(folded):
        for term in terms:
            if word.group().startswith(term):
                if term not in found:
                    found.append(term)
                first = min(first, word.start())
    if not found:
        return None
    score = len(found) / len(terms)
    if len(terms) > 1 and phrase and phrase in folded:
        first = min(first, folded.index(phrase))
        score += 0.25
    return KeywordMatch(found, first, round(score, 3))
