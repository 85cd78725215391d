"""The one validation point for text that enters the system: messages, titles, memory fields, ids.

Postgres cannot store a NUL character, and a lone surrogate is not Unicode (it has no
UTF-8 form): both are refused here, with where they are, instead of failing later
inside the database. Every string and list also has a length limit.

A value that shows nothing (``is_blank``: empty, spaces, or only invisible characters such as
U+200B, U+FEFF, U+00AD, U+3164) says nothing: a message of it is "empty", and a memory value of
it (``StatedText``: profile fields, preferences, facts, tasks, their list items) is refused; a
field is cleared with null, never with a blank string (docs/api.md).

The pydantic types (``BoundedText``, ``StatedText``, ``TextList``, ``Identifier``) are used by the
stored models (core.schemas), the HTTP bodies and the HTTP path ids. Their limits are
checked by validators rather than JSON-schema keywords (maxLength, maxItems), because
the same models are sent to chat models as structured-output schemas, and providers'
strict modes refuse those keywords.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, ValidationInfo
from pydantic_core import PydanticCustomError

from core.errors import InvalidMessage

DEFAULT_MAX_CHARS = 20000

# Limits of stored fields; generous for people, small enough to keep rows and prompts sane.
ID_CHARS = 200
"""Ids: chat, message, fact, task, interrupt (ours are UUIDs, 36 characters)."""
NAME_CHARS = 200
"""One short value: a profile field, a preference, a title, a tag, a due date."""
LINE_CHARS = 500
"""One item of a list: a goal, a note, a topic."""
TEXT_CHARS = 2000
"""A fact or a task description."""
LIST_ITEMS = 50
"""Items of any stored list (goals, notes, tags, topics)."""


def unstorable_reason(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL, a lone surrogate), or None when it can."""
    nul = text.find("\x00")
    if nul >= 0:
        return f"contains a NUL character (position {nul}), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate (position {exc.start}), which is not valid Unicode"
    return None


REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")  # a str holds code points: any of these is a lone surrogate


def made_storable(text: str) -> str:
    """``text`` with what Postgres cannot store (a NUL, a lone surrogate) replaced by U+FFFD, for text
    that is kept, not refused: what reaches a thread's state past the message routes' checks (a
    state editor's write, a model's or a tool's output). Unchanged, and cheap, when it is storable."""
    if "\x00" not in text and (text.isascii() or unstorable_reason(text) is None):
        return text
    return _SURROGATE.sub(REPLACEMENT, text.replace("\x00", REPLACEMENT))


def made_storable_value(value: Any) -> Any:
    """A JSON-like ``value`` (dicts, lists, strings, keys too) with :func:`made_storable` applied to
    every string; the same object when nothing needed it."""
    if isinstance(value, str):
        return made_storable(value)
    if isinstance(value, (dict, list, tuple)) and _storable_json(value):
        return value  # the usual case, some 25 times faster than the walk below (state channels' writes)
    if isinstance(value, dict):
        items = [(made_storable_value(k), made_storable_value(v)) for k, v in value.items()]
        return value if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())) else dict(items)
    if isinstance(value, (list, tuple)):
        items = [made_storable_value(v) for v in value]
        return value if all(v is v0 for v, v0 in zip(items, value)) else type(value)(items)
    return value


def _storable_json(value: Any) -> bool:
    """True when ``value`` surely holds no NUL and no lone surrogate: orjson refuses a lone surrogate
    and writes a NUL as ``\\u0000``. False also when orjson cannot write it (a key not text, say)."""
    try:
        return b"\\u0000" not in orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return False


# Letters (category Lo) that are drawn as nothing: the Hangul fillers, the half-width one, and the
# blank braille pattern. A text of these alone is as empty as one of spaces.
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Default-ignorable marks (category Mn) that are drawn as nothing on their own: the combining
# grapheme joiner, the Khmer inherent vowels, the Mongolian and the general variation selectors.
_INVISIBLE_MARKS = frozenset("\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f") | frozenset(map(chr, range(0xFE00, 0xFE10)))


def _invisible(char: str) -> bool:
    return (
        char.isspace()
        or char in _INVISIBLE_LETTERS
        or char in _INVISIBLE_MARKS
        or 0xE0100 <= ord(char) <= 0xE01EF  # variation selectors supplement
        or unicodedata.category(char) == "Cf"  # format characters: ZWSP, ZWJ, word joiner, BOM, soft hyphen, bidi controls, tags
    )


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: empty, or only whitespace and invisible characters (format
    characters such as U+200B, U+2060, U+FEFF, U+00AD, and fillers such as U+3164). Such a text says
    nothing, so it is refused where a value is required. The characters are only looked at here,
    never removed: a text with anything visible is kept exactly as it was sent."""
    return all(_invisible(c) for c in text)


def storable(text: str) -> str:
    """A pydantic after-validator: ``text`` unchanged, or a validation error saying what is wrong."""
    reason = unstorable_reason(text)
    if reason is not None:
        raise PydanticCustomError("unstorable_text", "The text {reason}.", {"reason": reason})
    return text


STORED = {"stored": True}
"""Validation context for reading back what is already stored (core.schemas.StoredModel): it was
checked on its way in, and a limit introduced or lowered since must not make memory unreadable."""
NEW_VALUES: dict = {}
"""Validation context of new input (a client's item): every bound applies, unlike STORED."""


def shortened(text: str, limit: int) -> str:
    """``text``, or when longer than ``limit`` characters its first ones ending in "…", ``limit`` in all."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def reading_stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and info.context.get("stored") is True


def _at_most_chars(max_chars: int):
    def check(text: str, info: ValidationInfo) -> str:
        if reading_stored(info):
            return text
        storable(text)
        if len(text) > max_chars:
            raise PydanticCustomError(
                "text_too_long",
                "The text is {length} characters long; the limit is {limit}.",
                {"length": f"{len(text):,}", "limit": f"{max_chars:,}"},
            )
        return text

    return check


def at_most_items(max_items: int):
    def check(items: list, info: ValidationInfo) -> list:
        if len(items) > max_items and not reading_stored(info):
            raise PydanticCustomError(
                "too_many_items", "The list has {count} items; the limit is {limit}.", {"count": len(items), "limit": max_items}
            )
        return items

    return check


def not_blank(text: str, info: ValidationInfo) -> str:
    """A pydantic after-validator: ``text`` unchanged, or a validation error when it is blank (is_blank).
    What is already stored is read as it is (STORED)."""
    if is_blank(text) and not reading_stored(info):
        raise PydanticCustomError(
            "blank_text",
            "The text is blank (empty, or only spaces or invisible characters); send a value, or null to clear the field.",
        )
    return text


def BoundedText(max_chars: int) -> Any:  # noqa: N802 - used as a type
    """``str`` that is storable and at most ``max_chars`` characters long."""
    return Annotated[str, AfterValidator(_at_most_chars(max_chars))]


def StatedText(max_chars: int) -> Any:  # noqa: N802 - used as a type
    """``BoundedText`` that is not blank (is_blank): a value someone stated (a profile field, a preference,
    a fact, a task's description or due date, an item of a list of those). "No value" is null (None)."""
    return Annotated[str, AfterValidator(_at_most_chars(max_chars)), AfterValidator(not_blank)]


def TextList(max_items: int = LIST_ITEMS, item_chars: int = LINE_CHARS, *, stated: bool = False) -> Any:  # noqa: N802 - used as a type
    """``list[str]`` of at most ``max_items`` storable items of at most ``item_chars`` characters
    (``stated``: none of them blank)."""
    item = StatedText(item_chars) if stated else BoundedText(item_chars)
    return Annotated[list[item], AfterValidator(at_most_items(max_items))]


StorableText = Annotated[str, AfterValidator(storable)]
"""Text without a length limit of its own (its size is bounded elsewhere), but storable."""

Identifier = BoundedText(ID_CHARS)
"""An id (path parameter, body field, model output): storable, at most ID_CHARS. A blank one is
allowed: models often send "" for "none", and an unknown id is a 404 where it is looked up."""

ShortText = BoundedText(NAME_CHARS)
LongText = BoundedText(TEXT_CHARS)

# Memory values: a blank one is refused (422 on HTTP), whoever sends it; null is how a field is cleared.
ShortValue = StatedText(NAME_CHARS)
"""A profile field, a preference, a task's due date."""
LongValue = StatedText(TEXT_CHARS)
"""A fact's text, a task's description."""
ValueList = TextList(stated=True)
"""Goals, other notes: every item stated."""


def validate_user_text(text: object, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Return the message, or raise InvalidMessage with a precise reason."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidMessage(f"The message is not valid UTF-8 (bad byte at position {exc.start}).") from exc
    if not isinstance(text, str):
        raise InvalidMessage(f"The message must be text, not {type(text).__name__}.")
    reason = unstorable_reason(text)
    if reason is not None:
        raise InvalidMessage(f"The message {reason}.")
    if is_blank(text):
        raise InvalidMessage("The message is empty." if not text.strip() else "The message is empty: it has only invisible characters.")
    if len(text) > max_chars:
        raise InvalidMessage(
            f"The message is too long: {len(text):,} characters, the limit is {max_chars:,} "
            "(Context.max_message_chars). Split it, or ingest it as a document with `memory-agent ingest`."
        )
    return text


def label_problem(text: str, limit: int = NAME_CHARS) -> str | None:
    """Why ``text`` is no short label (a key's label, a title or collection named on the command
    line), or None: not blank, at most ``limit`` characters, storable, one line of printable
    characters (a newline or an escape would forge or garble a listing's lines on a terminal)."""
    if is_blank(text):
        return "it is empty"
    if len(text) > limit:
        return f"it is {len(text):,} characters; at most {limit}"
    reason = unstorable_reason(text)
    if reason is not None:
        return f"it {reason}"
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        return f"it contains the control character U+{ord(bad):04X}; give one line of text"
    return None
