"""Words of a text as the matchers see them: tokens, stems, content words.

One home for splitting text into words and stemming them (NLTK's Porter stemmer, no corpus
download). New matchers take their words from here; the older ones are listed in
ARCHITECTURE.md's open items until they move.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

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
