"""Hiding what a user had the agent forget, in any text on its way to a model or an index.

A forget (memory.forgetting) records the forgotten item's distinctive words as salted hashes
of their stems (never the words: the record of a forget must not be a copy of what was
forgotten) and the messages it came from. A :class:`Redactor` built from those records removes
every clause that carries one of the words, and hides the source messages whole where they
do not carry one. Everything that sends text to a model (the reply prompt, the summary fold,
titles, extraction) or writes derived text (the index of what was said, chat records) passes
it through here, so a copy that the forget itself did not reach still never comes back.

The hashes are salted with the owner: they stop casual reading and accidental display, not
someone with the database who guesses words (forget-me deletes them with everything else).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage

from core.words import content_words, stem, words

MARK = "[forgotten]"
"""What stands where forgotten words were, in the model's view and in derived text."""

# Words of an item that say what kind of thing it is, not what it is: forgetting "Works as a nurse"
# forgets "nurse", not every sentence with "works" in it.
GENERIC = frozenset(
    """
    prefers prefer preferred preference wants user users named answer answers reply replies response
    responses years aged currently moved moving move born is has have had does doing job role location
    city place living home profile fact facts task tasks due goal goals level language native tone
    notes note yes none forget forgets forgot forgotten remember remembered delete deleted remove erase
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december morning evening tonight afternoon
    mon tue wed thu fri sat sun jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE = re.compile(r",|;|:|\s+(?:and|but|so|because|while|although|though|or|then)\s+|\s+[-–—]\s+", re.IGNORECASE)


def term_hash(owner: str, word_stem: str) -> str:
    return hashlib.sha256(f"{owner}\x00{word_stem}".encode("utf-8")).hexdigest()[:32]


def distinctive_stems(text: str) -> set[str]:
    """The stems a forget of ``text`` hides: its content words less the generic ones ("Works as
    a nurse" -> {"nurs"}); all its content words when nothing else is left ("short")."""
    content = content_words(text)
    found = [w for w in content if w not in GENERIC] or content or [w for w in words(text) if len(w) > 1]
    # A number is the thing only when nothing else is ("Is 31 years old"); a date in a task's text is not.
    found = [w for w in found if not w.isdigit()] or found
    return {stem(w) for w in found}


def term_hashes(owner: str, texts: Iterable[str]) -> set[str]:
    return {term_hash(owner, s) for text in texts for s in distinctive_stems(text)}


@dataclass(frozen=True)
class Redactor:
    """What one user had forgotten: ``hashes`` of forgotten word stems, and ``messages``
    ((thread_id, message_id)) hidden whole. An empty one changes nothing."""

    owner: str = ""
    hashes: frozenset[str] = frozenset()
    messages: frozenset[tuple[str, str]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.hashes or self.messages)

    # ------------------------------------------------------------------ text
    def _hits(self, text: str) -> bool:
        return any(term_hash(self.owner, stem(w)) in self.hashes for w in set(words(text)))

    def carries(self, text: str) -> bool:
        """Whether ``text`` carries a forgotten word."""
        return bool(self.hashes) and bool(text) and self._hits(text)

    def text(self, text: str) -> str:
        """``text`` without the clauses that carry a forgotten word (each run of them becomes MARK)."""
        if not self.carries(text):
            return text
        out: list[str] = []
        for sentence in _SENTENCE.split(text):
            if not sentence.strip() or not self._hits(sentence):
                out.append(sentence)
                continue
            kept = [c.strip() for c in _CLAUSE.split(sentence) if c.strip() and not self._hits(c)]
            kept = [c for c in kept if words(c)]
            end = sentence.rstrip()[-1:] if sentence.rstrip()[-1:] in ".!?" else ""
            out.append((", ".join(kept) + " " + MARK + end) if kept else MARK + end)
        joined = " ".join(s for s in out if s.strip())
        return re.sub(rf"(?:{re.escape(MARK)}\s*){{2,}}", MARK + " ", joined).strip()

    def hides(self, thread_id: str | None, message_id: str | None) -> bool:
        return bool(thread_id and message_id) and (thread_id, message_id) in self.messages

    def said(self, thread_id: str | None, message_id: str | None, text: str) -> str:
        """A message's text as derived data and models may see it."""
        return MARK if self.hides(thread_id, message_id) else self.text(text)

    # ------------------------------------------------------------------ structures
    def value(self, value: Any) -> Any:
        """A JSON-like value with every string redacted (ids kept); a list item that carried a
        forgotten word is left out (a fact list loses the fact)."""
        if not self or value is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: v if k in _ID_KEYS else self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            kept = []
            for item in value:
                if isinstance(item, str) and self.carries(item):
                    continue
                if isinstance(item, dict) and any(isinstance(v, str) and self.carries(v) for k, v in item.items() if k in _TEXT_KEYS):
                    continue
                kept.append(self.value(item))
            return kept
        return value

    def message(self, message: BaseMessage, thread_id: str | None = None) -> BaseMessage:
        """A copy of ``message`` as the model may see it (tool-call arguments included)."""
        if not self:
            return message
        if self.hides(thread_id, message.id):
            return message.model_copy(update={"content": MARK, **({"tool_calls": []} if isinstance(message, AIMessage) else {})})
        update: dict[str, Any] = {}
        if isinstance(message.content, str):
            if self.carries(message.content):
                update["content"] = self.text(message.content)
        else:
            parts = [
                {**p, "text": self.text(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                for p in message.content
            ]
            if parts != message.content:
                update["content"] = parts
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = [{**c, "args": self.value(c.get("args") or {})} for c in message.tool_calls]
            if calls != message.tool_calls:
                update["tool_calls"] = calls
        return message.model_copy(update=update) if update else message

    def messages_of(self, messages: Sequence[BaseMessage], thread_id: str | None = None, *, keep: str | None = None) -> list[BaseMessage]:
        """Every message redacted but the one whose id is ``keep`` (the user's message of this
        turn: what the user says now reaches the model as said)."""
        if not self:
            return list(messages)
        return [m if keep is not None and m.id == keep else self.message(m, thread_id) for m in messages]


_ID_KEYS = frozenset({"id", "thread_id", "chat_id", "message_id", "task_id", "sent_at", "created_at", "updated_at", "due_date", "last_activity"})
_TEXT_KEYS = frozenset({"text", "description", "summary_snippet", "title", "content", "value"})


def changed(before: Any, after: Any) -> bool:
    return json.dumps(before, sort_keys=True, default=str) != json.dumps(after, sort_keys=True, default=str)
