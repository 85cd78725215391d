"""Whether a user's message states something or only asks.

What the user asked is no evidence about them: "when did I say I was moving?" says nothing of a
move. The offline model quotes only what was stated (offline_model.recalled), and a chat whose
user messages only ask is not offered as a related chat (memory.recall).
"""

from __future__ import annotations

import re

from core.stopwords import CHAT_WORDS, FILLER, STOPWORDS
from core.words import word_runs

# A sentence opening like this asks, with or without its "?" ("tell me what I said about Lisbon").
_ASKS = re.compile(
    r"^(?:what|when|where|who|whom|whose|which|why|how|do|does|did|is|are|am|was|were|can|could|would|will|"
    r"should|shall|have|has|had|may|might|tell me|show me|give me|list|find|search|look up|explain|describe|"
    r"summari[sz]e|recall|remind me (?:what|when|where|who|which|how|if|whether|of|about what)|"
    r"(?:do you )?remember (?:what|when|where|who|which|how|if|whether))\b",
    re.I,
)
_SENTENCES = re.compile(r"(?<=[.!?。？！])\s+|\n+")
# Words that say nothing of a topic: function words, greetings, how people refer to a chat, and
# the verbs of asking about one.
NOT_CONTENT = STOPWORDS | FILLER | CHAT_WORDS | frozenset("say tell know remember mention mentioned".split())


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


def statement_words(text: str) -> list[str]:
    # "I'm" splits into "i" and "m": a one-letter piece is never content.
    return [w for w in word_runs(text.casefold()) if len(w) > 1 and w not in NOT_CONTENT]


def is_statement(sentence: str) -> bool:
    """A sentence that says something: not a question, not a request to look something up, and
    holding a word beyond greetings and function words."""
    s = sentence.strip()
    return bool(s) and not s.endswith(("?", "？")) and _ASKS.match(s) is None and bool(statement_words(s))


def stated(text: str) -> str:
    """The sentences of ``text`` that state something, joined ("" when it only asks or greets)."""
    return " ".join(s for s in sentences(text) if is_statement(s))


# Answers kept by the text's length and hash (not the text: a pasted page is not held on to):
# record_chat counts a chat's statements over every user message at each turn, and a chat of 5,000
# messages spent ~40 ms a turn here. Emptied when full (a plain dict is safe across threads).
_STATED: dict[tuple[int, int], bool] = {}
_STATED_MAX = 1 << 16


def states_something(text: str) -> bool:
    key = (len(text), hash(text))
    known = _STATED.get(key)
    if known is None:
        if len(_STATED) >= _STATED_MAX:
            _STATED.clear()
        known = _STATED[key] = any(is_statement(s) for s in sentences(text))
    return known


# "when did I say I was moving?", "what did I tell you about my move", "remember when I said …":
# the question asks for what was said, and what it names is what to look for.
_REPORTED = re.compile(
    r"\b(?:(?:did|have|had)\s+i\s+(?:ever\s+|once\s+|already\s+)?(?:say|mention|tell\s+you|write|talk\s+about|bring\s+up)"
    r"|i\s+(?:said|mentioned|told\s+you|wrote|talked\s+about|brought\s+up))\b\s*(?:that\s+|about\s+|of\s+)?(?P<about>[^?!.]*)",
    re.I,
)


def reported(question: str) -> str | None:
    """What a question about what the user said is about ("I was moving" for "When did I say I was
    moving?"), or None when it asks nothing of the kind (or names nothing to look for)."""
    if (m := _REPORTED.search(question)) is None:
        return None
    about = m.group("about").strip(" ,;:")
    return about if statement_words(about) else None
