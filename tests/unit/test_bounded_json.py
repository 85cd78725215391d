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


@pytest.mark.parametrize(
    "document, line, column",
    [
        (b'{"messages": [\n  {"role": "user" "text": "x"}]}', 2, 19),  # a comma left out
        (b'{"messages": [\n  {"role": "user"},,\n  {}]}', 2, 20),
        (b'{"title": "caf\xe9",\n "messages": []}', 1, 15),  # Latin-1, not UTF-8: the byte it is
        (b'{"messages": [{"role": "user"}]}\n{"messages": []}', 2, 1),  # two documents in one file
        (b'{"messages": [', 1, 15),  # cut short
    ],
)
def test_a_document_that_is_not_json_is_refused_saying_the_line_and_column_where_it_stops_being_json(document, line, column):
    """yajl's reason alone ("parse error: after key and value, inside map, I expect ',' or '}'") did not
    say which of a file's thousands of maps it meant."""
    with pytest.raises(InvalidJson, match=f", at line {line}, column {column}\\)$"):
        loads_bounded(document, max_values=100)
    with pytest.raises(InvalidImport, match=f", at line {line}, column {column}\\)\\.$"):
        read_import(document)


def test_an_empty_document_is_said_to_be_empty():
    for document in (b"", b" \n\t", "\ufeff".encode()):
        with pytest.raises(InvalidImport, match=r"^The history is not valid JSON \(it is empty\)\.$"):
            read_import(document)
