"""What the CLI writes to a terminal of text it did not write itself: a user's memory, chat titles,
a model's reply, a key's label."""

from __future__ import annotations

import re

# C0 and C1 control characters but newline, tab and a CRLF's carriage return: an escape sequence
# clears the screen or retitles the window, a bell rings, a lone carriage return writes over the
# line, a backspace hides what is before it.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def shown(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b``), so what it says is
    seen and nothing it holds acts on the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
