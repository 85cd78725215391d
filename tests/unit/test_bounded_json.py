"""core.bounded_json.loads_bounded on JSON that is not valid Unicode: refused as InvalidJson, never
changed and never an unexpected exception (issue: a lone surrogate escape gave a 500, or a '?')."""

from __future__ import annotations

import pytest

from core.bounded_json import InvalidJson, loads_bounded
from memory.chat_import import InvalidImport, read_import


def message(text: bytes) -> bytes:
    return b'{"messages": [{"role": "user", "text": "' + text + b'", "time": "2024-01-01T00:00:00Z"}]}'


@pytest.mark.parametrize(
    "escape",
    [rb"hi \udfff there", rb"hi \ud800 there", rb"hi \uD800", rb"\uDBFF\u0041", rb"\udc00\ud800", rb"\ud800\ud800\udc00", rb"\\\ud800"],
)
def test_a_lone_surrogate_escape_is_refused_not_replaced(escape):
    with pytest.raises(InvalidJson, match="surrogate"):
        loads_bounded(b'{"uuid": "' + escape + b'"}', max_values=10)
    with pytest.raises(InvalidImport, match="not valid JSON.*surrogate"):
        read_import(message(escape))


def test_a_surrogate_pair_and_an_escaped_backslash_are_read_as_they_are():
    assert loads_bounded(rb'["\ud83d\ude00", "\\ud800", "\\\\ud800", "a\u00e9"]', max_values=10) == ["\U0001F600", "\\ud800", "\\\\ud800", "a\u00e9"]
    assert loads_bounded(rb'{"\ud83d\ude00": "\uD83D\uDE00"}', max_values=10) == {"\U0001F600": "\U0001F600"}


def test_bytes_that_are_not_utf8_are_invalid_json():
    with pytest.raises(InvalidJson):
        loads_bounded(message(b"hi \xff there"), max_values=10)
    with pytest.raises(InvalidJson):
        loads_bounded(message(b"hi \xed\xbf\xbf there"), max_values=10)  # a surrogate encoded as UTF-8 bytes
