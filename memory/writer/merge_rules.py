"""The writer's rules for what is the same memory: when two facts are one (merge), when a new one
replaces an old (a single-valued slot), how importance grows, and a preference in words. Pure
functions and the thresholds they use; no reads or writes."""

from __future__ import annotations

import re
from typing import Any

from core.schemas import Importance, normalize_text
from core.words import accentless_words
from embeddings.calibration import CALIBRATED

MERGE_THRESHOLD = CALIBRATED.fact_merge
TASK_MATCH_THRESHOLD = CALIBRATED.task_match
TASK_DUPLICATE_THRESHOLD = CALIBRATED.task_duplicate

# Facts of which a user has one value at a time: a new value supersedes the old.
# Each slot is recognised by patterns on the normalized text ("is 30 years old" and
# "age is 30" are the same slot).
SINGLE_VALUED_SLOTS: dict[str, tuple[str, ...]] = {
    "lives in": (r"lives in ",),
    "works as": (r"works as ",),
    "works at": (r"works at ",),
    "name is": (r"(?:his |her |their |the user's )?name is ", r"is called "),
    "native language is": (r"native language is ",),
    "is married to": (r"is married to ",),
    "age": (r"age is \d", r"is \d+ years old$"),
}
_SLOT_PATTERNS = [(slot, re.compile(p)) for slot, patterns in SINGLE_VALUED_SLOTS.items() for p in patterns]

_RANK = {"low": 0, "medium": 1, "high": 2}
_BY_RANK = {v: k for k, v in _RANK.items()}

def raise_importance(a: Importance, b: Importance) -> Importance:
    """Hearing something again makes it matter more: one step above the higher of the two."""
    return _BY_RANK[min(2, max(_RANK[a], _RANK[b]) + 1)]  # type: ignore[return-value]

def slot_of(text: str) -> str | None:
    norm = normalize_text(text)
    for slot, pattern in _SLOT_PATTERNS:
        if pattern.match(norm):
            return slot
    return None

def refines(a: str, b: str) -> bool:
    """One text restates the other with more detail ("Lives in Haifa" / "Lives in Haifa, Israel")."""
    na, nb = normalize_text(a), normalize_text(b)
    return na in nb or nb in na


def _value_words(value: str) -> list[str]:
    return [w for w in accentless_words(value) if w not in ("a", "an", "the")]


def names_value(said: str, stored: str) -> bool:
    """``said`` names the value ``stored``, in other case, accents or detail: the words of one begin the
    other's ("Rome" / "rome, Italy"), not end them ("York" is not "New York")."""
    a, b = _value_words(said), _value_words(stored)
    short, long = sorted((a, b), key=len)
    return bool(short) and long[: len(short)] == short


def contradicts(new_text: str, old_text: str) -> bool:
    """Another value for the same single-valued slot: an update, never a merge."""
    slot = slot_of(new_text)
    return slot is not None and slot_of(old_text) == slot and not refines(new_text, old_text)


_NUMBER = re.compile(r"\d+")


def other_numbers(new_text: str, old_text: str) -> bool:
    """Both facts carry numbers and not the same ones: another date or count ("Has an exam next Tuesday
    (2026-12-01)" / "(2026-12-08)" embed at 0.996), never a merge that would keep the old one."""
    new, old = _NUMBER.findall(new_text), _NUMBER.findall(old_text)
    return bool(new) and bool(old) and sorted(new) != sorted(old)


# A fact and its negation ("Is allergic to peanuts" / "Is not allergic to peanuts", "Likes tea" /
# "Dislikes tea anymore") embed alike (cosine up to 0.96) but say opposite things: never one memory.
_NEGATION = re.compile(r"\b(?:not|no longer|never|anymore|any more)\b")
_LIKING = {"loves": "likes", "enjoys": "likes", "adores": "likes", "dislikes": "not likes", "hates": "not likes"}


def _claim(text: str) -> tuple[str, bool]:
    """What a fact says, without its negation, and whether it is negated."""
    words = normalize_text(text).split()
    if words and words[0] in _LIKING:
        words[0] = _LIKING[words[0]]
    said = " ".join(words)
    return " ".join(_NEGATION.sub(" ", said).split()), bool(_NEGATION.search(said))


def opposes(new_text: str, old_text: str) -> bool:
    """``new_text`` says the opposite of ``old_text``: the same claim, one of them negated."""
    (new, new_negated), (old, old_negated) = _claim(new_text), _claim(old_text)
    return bool(new) and new == old and new_negated != old_negated


def preference_in_words(key: str, value: Any) -> list[str]:
    """A preference as a person would say it ("prefers bullet points"), never "prefers_bullets = True"."""
    if key == "other_notes":
        return [str(v) for v in value]
    if key == "prefers_bullets":
        return ["prefers bullet points" if value else "prefers no bullet points"]
    if key == "code_examples":
        return ["wants code examples" if value else "wants no code examples"]
    if key == "answer_length":
        return [f"prefers {value} answers"]
    if key == "language":
        return [f"prefers answers in {value}"]
    if key == "tone":
        return [f"prefers a {value} tone"]
    return [f"prefers {key.replace('_', ' ')}: {value}"]
