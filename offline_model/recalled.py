"""The offline model's answer from excerpts of earlier conversations: what the user said, dated and
named by its chat, when it bears on the question.

The reply prompt's ``## From earlier conversations`` section (``prompts.reply_prompt.render_excerpts``)
holds excerpts headed ``[2 March 2025, "Moving"]`` (a later excerpt of the same chat by its date
alone, or ``…`` on the same day), one ``role: text`` line per message, ``role (date): text`` when
a line was said on another day than its header. Quoted are the user's lines that state something
(a question they asked is no evidence: ``core.statements``) and share a content word with the
current message, best first:

    On 2 March 2025, in 'Moving', you said: "I'm moving to Lisbon in the spring."
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.statements import statement_words, sentences, is_statement
from core.words import light_stem

__all__ = ["Quote", "quotes_for", "render_quotes"]

MAX_QUOTES = 2
MAX_QUOTE_CHARS = 200

_HEADER = re.compile(r'^\[(?P<date>[^,\]"]+?)(?:,\s*"(?P<title>.*)")?\]$')
_LINE = re.compile(r"^(?P<role>user|assistant)(?: \((?P<date>[^)]+)\))?: (?P<text>.*)$")


@dataclass(frozen=True)
class Quote:
    date: str
    title: str
    text: str
    shared: int  # content words in common with the current message


def _stem(word: str) -> str:
    """A light stem, so "moving", "moved" and "move" are one word."""
    return light_stem(word, suffixes=("ing", "ed", "es", "e", "s"))


def _stems(text: str) -> set[str]:
    return {_stem(w) for w in statement_words(text)}


def _said_lines(section: str):
    """(date, chat title, text) of each user line of the excerpts, in order."""
    date = title = ""
    for raw in section.splitlines():
        line = raw.strip()
        if not line or line == "…" or line.startswith("…("):
            continue
        if (header := _HEADER.match(line)) is not None:
            date = header.group("date").strip()
            if header.group("title") is not None:
                title = header.group("title")
            continue
        if (said := _LINE.match(line)) is not None and said.group("role") == "user":
            yield said.group("date") or date, title, said.group("text")


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut[: cut.rfind(" ")] if " " in cut else cut).rstrip(" ,;:") + "…"


def quotes_for(section: str, question: str) -> list[Quote]:
    """What the user stated in the excerpts that bears on ``question``: at most MAX_QUOTES, the most
    words in common first, shown oldest first. The question itself, said again, is never quoted."""
    wanted = _stems(question)
    if not wanted:
        return []
    asked = " ".join(question.casefold().split())
    found: list[tuple[int, Quote]] = []
    for order, (date, title, text) in enumerate(_said_lines(section)):
        if " ".join(text.casefold().split()) == asked:
            continue
        stated = " ".join(s for s in sentences(text) if is_statement(s))
        shared = len(_stems(stated) & wanted) if stated else 0
        if shared:
            found.append((order, Quote(date, title, _clip(stated, MAX_QUOTE_CHARS), shared)))
    best = sorted(found, key=lambda f: (-f[1].shared, -f[0]))[:MAX_QUOTES]  # ties: the newest
    return [q for _, q in sorted(best, key=lambda f: f[0])]


def render_quotes(quotes: list[Quote]) -> str:
    """``On 2 March 2025, in 'Moving', you said: "…"`` for each quote, space-joined."""
    out = []
    for q in quotes:
        where = f", in '{q.title}'" if q.title else ""
        end = "" if q.text.endswith((".", "!", "…")) else "."  # a sentence ends once, inside the quote or after it
        out.append(f'On {q.date}{where}, you said: "{q.text}"{end}')
    return " ".join(out)
