"""Rule-based memory extraction: the offline model's stand-in for the extraction call.

Not an LLM: a fixed list of patterns over the user's message (English, plus a few Italian
and Hebrew equivalents) that produce the same :class:`ExtractionResult` a model would.
It is deliberately conservative: a missed memory is cheaper than a wrong one, so
questions, hypotheticals ("if I lived in …") and vague objects ("I like your answer")
produce nothing.

Facts are written with English templates ("Lives in X", "Works as a X") whatever the
language of the message; the values (names, places) keep the user's spelling.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from core.schemas import ExtractionResult
from offline_model.rules import about_you, wishes_and_tasks  # noqa: F401 - importing registers their rules, in this order
from offline_model.rules.builder import _QUESTION_RULES, _RULES, _Builder

log = logging.getLogger(__name__)

__all__ = ["extract_with_rules"]


# --------------------------------------------------------------------------- entry point
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+|;\s*")
_HYPOTHETICAL = re.compile(
    r"^\s*(?:if|suppose|supposing|imagine|assuming|what if|let's say|pretend|se|immagina)\b"
    # A request for fiction or a role is no statement about the user ("Write a story where I live on Mars").
    r"|^\s*(?:(?:please|can you|could you|would you)\s+)?(?:write|tell|make up|invent|compose|imagine)\b[^,;]*\b(?:story|poem|song|tale|fable|novel|joke)\b[^,;]*\b(?:where|in which|about|that)\b",
    re.I,
)
# Said anywhere in a sentence, these make it a role or a story ("Let's do a roleplay where I live in Haifa").
_ROLE_PLAY = re.compile(r"\b(?:role[- ]?play|in (?:a|this|the|our) story|pretend (?:that )?I)\b", re.I)
# What someone else said or thinks is their statement, not the user's: after "my friend said" a
# "my name is Bob" is the friend's words. The user's own "as I said, my name is Dana" still counts.
_REPORTED = re.compile(
    r"\b(?P<who>[\w']+)\s+(?:(?:once|always|just|also|then|even|keeps?)\s+)?"
    r"(?:said|says|say|saying|told me|tells me|tell me|telling me|thinks|think|thought|claims|claimed|wrote|writes|asked me|asks me)\b",
    re.I,
)
_I_FORMS = frozenset({"i", "i've", "i'd", "i'll"})


def _reported_from(sentence: str) -> int | None:
    """Where the words of someone other than the user begin in ``sentence`` (None: no one else speaks)."""
    for m in _REPORTED.finditer(sentence):
        if m.group("who").lower() not in _I_FORMS:
            return m.end()
    return None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


def extract_with_rules(user_message: str, stored: dict[str, Any] | None = None) -> ExtractionResult:
    """Memories the user stated in ``user_message``, found by fixed rules (deterministic).

    ``stored`` holds related memories already saved, in the extraction prompt's shape
    (``{"facts": [{"id", "text", ...}], "tasks": [{"id", "description", "status"}], ...}``);
    every key is optional. It is used to skip facts already stored, to supersede an old
    "Lives in …" / "Works as …" fact, and to find the id of a task the user says is done.
    """
    builder = _Builder(stored)
    text = (user_message or "").replace("’", "'").replace("‘", "'")
    casual = not any(c.isupper() for c in text)
    for sentence in _sentences(text):
        if _HYPOTHETICAL.match(sentence) or _ROLE_PLAY.search(sentence):
            continue
        is_question = sentence.rstrip().endswith("?")
        rules = _QUESTION_RULES if is_question else _RULES
        body = sentence.rstrip(" ?")
        reported = _reported_from(body)
        for pattern, rule in rules:
            for m in pattern.finditer(body):
                if reported is not None and m.start() >= reported:
                    continue
                try:
                    rule(m, builder, casual)
                except ValueError:  # a value its schema refuses (a task of invisible characters): not a memory
                    log.info("rule %s kept nothing from a match the schema refused", rule.__name__)
    return builder.result()
