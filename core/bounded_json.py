"""Reading untrusted JSON with bounds on what it may build: values, and nesting depth.

``json.loads`` builds the whole document before anyone can look at it: a 28 MB import of tiny
messages became 470,000 dicts (793 MB) before it was refused, and a deeply nested document
raises RecursionError. Here the document is read as a stream of parse events (ijson's C
backend) and built value by value; the read stops with :class:`JsonTooLarge` the moment it
would build more than ``max_values`` values or nest deeper than ``max_depth``, so what it holds
stays a small multiple of the input whatever the input is.

The document must be valid Unicode: a byte that is not UTF-8, or an escape of a lone surrogate
(``"\\ud800"`` without its low half, ``"\\udfff"`` alone), is :class:`InvalidJson`. (ijson's C
backend would turn a lone high surrogate into "?" and fail on a lone low one with
UnicodeDecodeError, so the escapes are looked for before the parse.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import ijson

MAX_DEPTH = 64
# \uD800 to \uDFFF: an escape when an even number of backslashes (escaped ones) comes before it.
_SURROGATE_ESCAPE = re.compile(rb"\\u([dD][89a-fA-F][0-9a-fA-F]{2})")


class InvalidJson(ValueError):
    """Not JSON (the message says where)."""


class JsonTooLarge(ValueError):
    """The document would build more values, or nest deeper, than allowed."""


def loads_bounded(data: bytes | str, *, max_values: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``data``, built only while it stays within the bounds."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidJson(f"not valid JSON (a lone surrogate at character {exc.start} is not valid Unicode)") from None
    if not data.strip():
        raise InvalidJson("not valid JSON (it is empty)")
    lone = _lone_surrogate(data)
    if lone is not None:
        raise InvalidJson(f"not valid JSON (the escape \\u{lone.group(1).decode()} at byte {lone.start()} is a lone surrogate, which is not valid Unicode)")
    stack: list[Any] = []
    keys: list[str | None] = []
    key_memo: dict[str, str] = {}  # one str object per distinct key, as json.loads does
    root: list[Any] = []
    values = 0

    def add(value: Any) -> None:
        if not stack:
            root.append(value)
        elif keys[-1] is None:
            stack[-1].append(value)
        else:
            stack[-1][keys[-1]] = value

    try:
        for event, value in ijson.basic_parse(data, use_float=True):
            if event == "map_key":
                keys[-1] = key_memo.setdefault(value, value)
                continue
            if event in ("end_map", "end_array"):
                stack.pop()
                keys.pop()
                continue
            values += 1
            if values > max_values:
                raise JsonTooLarge(f"it holds more than {max_values:,} JSON values")
            if event in ("start_map", "start_array"):
                container: Any = {} if event == "start_map" else []
                add(container)
                stack.append(container)
                keys.append("" if event == "start_map" else None)
                if len(stack) > max_depth:
                    raise JsonTooLarge(f"it is nested deeper than {max_depth} levels")
            else:
                add(value)
    except ijson.JSONError as exc:
        raise InvalidJson(f"not valid JSON ({_reason(exc)}{_where(data)})") from None
    except ijson.IncompleteJSONError as exc:  # (a JSONError in some versions; kept for the others)
        raise InvalidJson(f"not valid JSON ({_reason(exc)}{_where(data)})") from None
    except UnicodeDecodeError as exc:  # bytes of a surrogate, which the backend passes on as they are
        raise InvalidJson(f"not valid JSON (it is not valid UTF-8: {exc.reason}{_where(data)})") from None
    if not root:
        raise InvalidJson("not valid JSON (empty)")
    return root[0]


def _reason(exc: Exception) -> str:
    """The parser's reason as readable text: yajl gives bytes (b'lexical error: …\\n   \\xf5 (right
    here) ------^'), which showed a binary file's bytes escaped; its first line says what is wrong
    (without its full stop: the place follows it)."""
    reason = exc.args[0] if exc.args else str(exc)
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    return str(reason).strip().splitlines()[0].strip().rstrip(".") if str(reason).strip() else "unreadable"


def _where(data: bytes) -> str:
    """Where the document stops being JSON, as ", at line L, column C" ("" when not found): yajl names
    only what is wrong, and in a file of megabytes that is no help to whoever has to mend it. Only on
    the error path: the stdlib's parser finds the place, each object and number dropped as soon as it is
    read, so it holds about twice the document's size (before the error, the bounds held)."""
    at = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # the first byte that is not UTF-8 is a place too (an escaped character)
        at.append(len(data[: exc.start].decode("utf-8")))
        text = data.decode("utf-8", "surrogateescape")
    drop = lambda _: None  # noqa: E731
    try:
        json.loads(text, object_pairs_hook=drop, parse_float=drop, parse_int=drop, parse_constant=drop)
    except json.JSONDecodeError as exc:
        at.append(exc.pos)
    except (RecursionError, ValueError):
        pass
    if not at:
        return ""
    i = min(at)
    return f", at line {text.count(chr(10), 0, i) + 1}, column {i - text.rfind(chr(10), 0, i)}"


def _lone_surrogate(data: bytes) -> re.Match | None:
    """The first escape of a surrogate that is not half of a pair (a high one directly followed by a low one)."""
    high: re.Match | None = None  # a high surrogate waiting for its low half
    for match in _SURROGATE_ESCAPE.finditer(data):
        before = match.start()
        while before > 0 and data[before - 1] == 0x5C:  # backslash
            before -= 1
        if (match.start() - before) % 2:
            continue  # an escaped backslash, then the text "u" and four hex digits
        low = int(match.group(1), 16) >= 0xDC00
        if high is not None:
            if low and match.start() == high.end():
                high = None
                continue
            return high
        if low:
            return match
        high = match
    return high
