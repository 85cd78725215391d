"""Reading untrusted JSON with bounds on what it may build: values, and nesting depth.

``json.loads`` builds the whole document before anyone can look at it: a 28 MB import of tiny
messages became 470,000 dicts (793 MB) before it was refused, and a deeply nested document
raises RecursionError. Here the document is read as a stream of parse events (ijson's C
backend) and built value by value; the read stops with :class:`JsonTooLarge` the moment it
would build more than ``max_values`` values or nest deeper than ``max_depth``, so what it holds
stays a small multiple of the input whatever the input is.
"""

from __future__ import annotations

from typing import Any

import ijson

MAX_DEPTH = 64


class InvalidJson(ValueError):
    """Not JSON (the message says where)."""


class JsonTooLarge(ValueError):
    """The document would build more values, or nest deeper, than allowed."""


def loads_bounded(data: bytes | str, *, max_values: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``data``, built only while it stays within the bounds."""
    if isinstance(data, str):
        data = data.encode("utf-8")
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
        raise InvalidJson(f"not valid JSON ({exc})") from None
    except ijson.IncompleteJSONError as exc:  # (a JSONError in some versions; kept for the others)
        raise InvalidJson(f"not valid JSON ({exc})") from None
    if not root:
        raise InvalidJson("not valid JSON (empty)")
    return root[0]
