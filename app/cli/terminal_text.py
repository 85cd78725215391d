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


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 task", "2 tasks", "0 chats": a count as a sentence says it."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


# What forget-me's counts (memory.chat_admin.forget_user_everywhere) are, in words.
_FORGOTTEN = {
    "chats": ("chat", None), "memories": ("memory", "memories"), "messages": ("indexed message", None),
    "forgets": ("record of an earlier forget", "records of earlier forgets"), "api_keys": ("API key", None), "runs": ("run", None),
}  # fmt: skip


def what_was_forgotten(counts: dict[str, int]) -> str:
    """Forget-me's counts as a sentence says them ("1 chat, 2 memories and 1 run"), leaving out what
    there was none of; a count of a kind not named here is said by its key."""
    parts = [counted(n, *_FORGOTTEN.get(key, (key.replace("_", " "), key.replace("_", " ")))) for key, n in counts.items() if n]
    if not parts:
        return "there was nothing stored"
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
