"""Words of a text as the matchers see them: tokens, stems, content words.

One home for splitting text into words and stemming them (NLTK's Porter stemmer, no corpus
download). New matchers take :func:`words`, :func:`stem` and :func:`content_words`; the older
matchers' own splitters and suffix stems live here too, as named variants
(tests/unit/test_one_home.py fails on a word splitter elsewhere).
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


_POSSESSIVE = re.compile(r"'s?$")


@lru_cache(maxsize=65536)
def plain_word(word: str) -> str:
    """``word`` (one of :func:`words`) without a possessive ("zelda's" -> "zelda", "james'" ->
    "james") and, when only accents keep it from ASCII, without them ("zürich" -> "zurich"; "が" keeps
    its mark, which makes it another word): how a forget matches a word however it was written."""
    word = _POSSESSIVE.sub("", word) or word
    if word.isascii():
        return word
    bare = "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))
    return bare if bare.isascii() else word


def plain_stem(word: str) -> str:
    """The stem of :func:`plain_word`: "Zelda's" and "Zelda", "Zürich" and "Zurich" share one."""
    return stem(plain_word(word))


def stems(text: str) -> list[str]:
    return [stem(w) for w in words(text)]


def is_content_word(word: str) -> bool:
    """A word that says what a text is about: not a function word, a vague or everyday chat word."""
    return len(word) > 1 and word not in STOPWORDS and word not in VAGUE and word not in LOW_CONTENT


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if is_content_word(w)]


# --------------------------------------------------------------------------- older matchers' words
# What the older matchers split and stem by, moved here unchanged: they differ from words() and
# stem() (no normalization, underscores and digits inside words, suffix stems) and their tests pin
# what they match, so each keeps its own variant rather than one rewording all of them.
WORD_RUN = re.compile(r"\w+")
_WORD_WITH_APOSTROPHE = re.compile(r"\w+(?:'\w+)?")
_HYPHENATED = re.compile(r"[\w-]+")
# A word starts with a letter and keeps inner apostrophes and hyphens ("O'Brien", "well-known");
# a number keeps its separators ("3.5", "12:30", "1/2").
_WORD_OR_NUMBER = re.compile(r"[^\W\d_][\w'’-]*|\d[\d.,:/]*", re.UNICODE)
LIGHT_SUFFIXES = ("ing", "ed", "es", "s")


def word_runs(text: str) -> list[str]:
    """Runs of word characters (``\\w+``: letters, digits, underscores) as written; callers fold."""
    return WORD_RUN.findall(text)


def words_with_apostrophe(text: str) -> list[str]:
    """Like :func:`word_runs`, one apostrophe kept inside a word ("don't" is one word)."""
    return _WORD_WITH_APOSTROPHE.findall(text)


def hyphenated_words(text: str) -> list[str]:
    """Word runs with their hyphens, so a code such as "XR-2291-B" stays one word."""
    return _HYPHENATED.findall(text)


def words_and_numbers(text: str) -> list[str]:
    """Words as written (capitals kept, for names) and numbers with their separators."""
    return _WORD_OR_NUMBER.findall(text)


def accentless_words(text: str) -> list[str]:
    """Casefolded word runs with accents dropped ("Café" -> "cafe"), for matching across spellings."""
    plain = unicodedata.normalize("NFKD", text.casefold())
    return word_runs("".join(c for c in plain if not unicodedata.combining(c)))


def light_stem(word: str, *, suffixes: Sequence[str] = LIGHT_SUFFIXES, min_stem: int = 3) -> str:
    """``word`` without its first matching suffix, when at least ``min_stem`` letters remain
    ("plays" -> "play", "renewing" -> "renew"): a stem for English templates, no dictionary."""
    for suffix in suffixes:
        if len(word) - len(suffix) >= min_stem and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


# --------------------------------------------------------------------------- keyword matching
# Search as the user types it (the MCP and history searches): a term matches the words it starts.
_TYPED_WORD = WORD_RUN


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


# A fact or goal is stored in the third person (the extraction contract, prompts/extraction.md), but
# the rules copy the user's words, and a model may too: "improve my endurance" reads as the assistant's.
_FIRST_PERSON = {
    "I'm": "they're", "I am": "they are", "I was": "they were", "I've": "they've", "I'd": "they'd", "I'll": "they'll",
    "I": "they", "my": "their", "My": "their", "me": "them", "myself": "themselves", "mine": "theirs",
}
_FIRST_PERSON_WORDS = re.compile(r"\b(?:I'm|I am|I was|I've|I'd|I'll|I|[Mm]y|me|myself|mine)\b")


def third_person(text: str) -> str:
    """The user's first-person words in a fact or goal, in the third person ("help my team" → "help their team")."""
    return _FIRST_PERSON_WORDS.sub(lambda m: _FIRST_PERSON[m.group(0)], text)
