"""Hiding what a user had the agent forget, in any text on its way to a model or an index.

A forget (memory.forgetting) records the forgotten item's distinctive words as salted hashes
of their stems (never the words: the record of a forget must not be a copy of what was
forgotten) and the messages it came from. A :class:`Redactor` built from those records removes
every clause that carries one of the words, and hides the source messages whole where they
do not carry one. A message deleted outright (memory.chat_admin) adds its distinctive words
with a narrower scope, ``reply_hashes``: hidden in what the agent said (its replies, tool
results, excerpt lines of the assistant), where a reply may have quoted it, never in the user's
own other messages, which are statements of their own. Everything that sends text to a model
(the reply prompt, the summary fold, titles, extraction) or writes derived text (the index of
what was said, chat records) passes it through here, so a copy that the forget itself did not reach still never comes back.

The hashes are salted with the owner: they stop casual reading and accidental display, not
someone with the database who guesses words (forget-me deletes them with everything else).
"""

from __future__ import annotations

import hashlib
import json
import re
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Literal, Sequence, TypeVar, Union, get_args, get_origin

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel

from core.words import content_words, plain_stem, stem, words

MARK = "[forgotten]"
"""What stands where forgotten words were, in the model's view and in derived text."""

M = TypeVar("M", bound=BaseModel)


class Verbatim(str):
    """A string :meth:`Redactor.value` leaves as it is: a value of a closed vocabulary (a role, a
    status), which holds no one's words."""

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


@lru_cache(maxsize=131072)  # every redacted text hashes each of its words twice
def term_hash(owner: str, word_stem: str) -> str:
    return hashlib.sha256(f"{owner}\x00{word_stem}".encode("utf-8")).hexdigest()[:32]


def distinctive_stems(text: str) -> set[str]:
    """The stems a forget of ``text`` hides: its content words less the generic ones ("Works as
    a nurse" -> {"nurs"}); all its content words when nothing else is left ("short")."""
    content = content_words(text)
    found = [w for w in content if w not in GENERIC] or content or [w for w in words(text) if len(w) > 1]
    # A number is the thing only when nothing else is ("Is 31 years old"); a date in a task's text is not.
    found = [w for w in found if not w.isdigit()] or found
    return {plain_stem(w) for w in found}


def term_hashes(owner: str, texts: Iterable[str]) -> set[str]:
    return {term_hash(owner, s) for text in texts for s in distinctive_stems(text)}


def deleted_stems(text: str) -> set[str]:
    """The stems a message deleted outright hides in the agent's replies: its content words less
    the generic ones, numbers and codes included ("My passport number is K4477123" ->
    {"passport", "number", "k4477123"}); none when it has none ("Yes!": unlike a forget's, a deletion's
    text names no one thing, so all its words are never taken for the thing when nothing is left)."""
    return {plain_stem(w) for w in content_words(text) if w not in GENERIC}


def deleted_hashes(owner: str, text: str) -> set[str]:
    return {term_hash(owner, s) for s in deleted_stems(text)}


@dataclass(frozen=True)
class Redactor:
    """What one user had forgotten: ``hashes`` of forgotten word stems, hidden in every text;
    ``reply_hashes`` (the words of messages deleted outright), hidden only in what the agent said
    (``reply=True``: a reply, a tool result, an assistant's line); and ``messages``
    ((thread_id, message_id)) hidden whole. An empty one changes nothing."""

    owner: str = ""
    hashes: frozenset[str] = frozenset()
    messages: frozenset[tuple[str, str]] = frozenset()
    reply_hashes: frozenset[str] = frozenset()
    _in_replies: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_in_replies", self.hashes | self.reply_hashes)

    def __bool__(self) -> bool:
        return bool(self.hashes or self.messages or self.reply_hashes)

    # ------------------------------------------------------------------ text
    def _scope(self, reply: bool) -> frozenset[str]:
        return self._in_replies if reply else self.hashes

    def _hits(self, text: str, hashes: frozenset[str]) -> bool:
        # A word matches by its plain stem (possessive and accents dropped: what forgets record) or
        # by its stem as written (what a forget recorded before 3 Dec 2026, "zelda'" for "Zelda's").
        return any(term_hash(self.owner, plain_stem(w)) in hashes or term_hash(self.owner, stem(w)) in hashes for w in set(words(text)))

    def carries(self, text: str, *, reply: bool = False) -> bool:
        """Whether ``text`` carries a forgotten word (``reply``: ``text`` is what the agent said,
        where the words of deleted messages are hidden too)."""
        hashes = self._scope(reply)
        return bool(hashes) and bool(text) and self._hits(text, hashes)

    def text(self, text: str, *, reply: bool = False) -> str:
        """``text`` without the clauses that carry a forgotten word (each run of them becomes MARK)."""
        if not self.carries(text, reply=reply):
            return text
        hashes = self._scope(reply)
        out: list[str] = []
        for sentence in _SENTENCE.split(text):
            if not sentence.strip() or not self._hits(sentence, hashes):
                out.append(sentence)
                continue
            kept = [c.strip() for c in _CLAUSE.split(sentence) if c.strip() and not self._hits(c, hashes)]
            kept = [c for c in kept if words(c)]
            end = sentence.rstrip()[-1:] if sentence.rstrip()[-1:] in ".!?" else ""
            out.append((", ".join(kept) + " " + MARK + end) if kept else MARK + end)
        joined = " ".join(s for s in out if s.strip())
        return re.sub(rf"(?:{re.escape(MARK)}\s*){{2,}}", MARK + " ", joined).strip()

    def hides(self, thread_id: str | None, message_id: str | None) -> bool:
        return bool(thread_id and message_id) and (thread_id, message_id) in self.messages

    def said(self, thread_id: str | None, message_id: str | None, text: str, *, reply: bool = False) -> str:
        """A message's text as derived data and models may see it (``reply``: the agent said it)."""
        return MARK if self.hides(thread_id, message_id) else self.text(text, reply=reply)

    # ------------------------------------------------------------------ structures
    def value(self, value: Any, *, reply: bool = False) -> Any:
        """A JSON-like value with every string redacted (ids kept); a list item that carried a
        forgotten word is left out (a fact list loses the fact). A dict with a ``role`` (an
        excerpt's line, a search hit) is what the agent said when it is the assistant's or a tool's."""
        if not self or value is None or isinstance(value, Verbatim):
            return value
        if isinstance(value, str):
            return self.text(value, reply=reply)
        if isinstance(value, dict):
            reply = _said_by_agent(value, reply)
            return {k: v if k in _ID_KEYS else self.value(v, reply=reply) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            kept = []
            for item in value:
                if isinstance(item, str) and self.carries(item, reply=reply):
                    continue
                if isinstance(item, dict):
                    by_agent = _said_by_agent(item, reply)
                    if any(isinstance(v, str) and self.carries(v, reply=by_agent) for k, v in item.items() if k in _TEXT_KEYS):
                        continue
                kept.append(self.value(item, reply=reply))
            return kept
        return value

    def result(self, model: M) -> M:
        """A copy of a pydantic result with its text redacted as :meth:`value` does, its fields of a
        closed vocabulary (a Literal: a role, a status, an importance) kept: redacted, "medium" after a
        forget of "Medium Rare" would be a value the result refuses."""
        if not self:
            return model
        return type(model).model_validate(self.value(_closed_kept(model, model.model_dump(mode="json"))))

    def message(self, message: BaseMessage, thread_id: str | None = None) -> BaseMessage:
        """A copy of ``message`` as the model may see it (tool-call arguments included)."""
        if not self:
            return message
        if self.hides(thread_id, message.id):
            return message.model_copy(update={"content": MARK, **({"tool_calls": []} if isinstance(message, AIMessage) else {})})
        reply = not isinstance(message, HumanMessage)  # a reply, a tool result: what the agent said
        update: dict[str, Any] = {}
        if isinstance(message.content, str):
            if self.carries(message.content, reply=reply):
                update["content"] = self.text(message.content, reply=reply)
        else:
            parts = [
                {**p, "text": self.text(p["text"], reply=reply)} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                for p in message.content
            ]
            if parts != message.content:
                update["content"] = parts
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = [{**c, "args": self.value(c.get("args") or {}, reply=True)} for c in message.tool_calls]
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


_AGENT_ROLES = frozenset({"assistant", "ai", "tool"})
_USER_ROLES = frozenset({"user", "human"})


def _said_by_agent(item: dict, default: bool) -> bool:
    """Whether a dict is what the agent said: its ``role`` says whose line it is (an excerpt's line,
    a search hit); any other dict (a profile's "role" is a job) is as the value it is in."""
    role = item.get("role")
    if not isinstance(role, str):
        return default
    return True if role in _AGENT_ROLES else False if role in _USER_ROLES else default


def _closed_kept(model: BaseModel, dumped: dict) -> dict:
    """``dumped`` (``model`` dumped to JSON) with the values of its closed fields, nested ones too, as Verbatim."""
    for name, info in type(model).model_fields.items():
        value, out = getattr(model, name), dumped.get(name)
        if _closed(info.annotation) and isinstance(out, str):
            dumped[name] = Verbatim(out)
        elif isinstance(value, BaseModel) and isinstance(out, dict):
            _closed_kept(value, out)
        elif isinstance(value, (list, tuple)) and isinstance(out, list):
            for item, item_out in zip(value, out):
                if isinstance(item, BaseModel) and isinstance(item_out, dict):
                    _closed_kept(item, item_out)
    return dumped


def _closed(annotation: Any) -> bool:
    """Whether a field's type is a Literal (or an optional one)."""
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return any(get_origin(o) is Literal for o in options) and all(get_origin(o) is Literal or o is type(None) for o in options)


def changed(before: Any, after: Any) -> bool:
    return json.dumps(before, sort_keys=True, default=str) != json.dumps(after, sort_keys=True, default=str)
