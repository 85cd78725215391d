"""The one token counter: every budget, cost figure and eval uses it, so a budget holds exactly.

tiktoken cannot fetch its encodings offline, so counts follow langchain-core's
``count_tokens_approximately``: ceil(characters / 4) for a string, plus the role and a
per-message overhead for messages. Counting is subadditive (the count of a joined text is at
most the sum of its parts' counts), which is what lets per-item costs bound a rendered section.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

CHARS_PER_TOKEN = 4.0
TRIM_MARKER = "…(trimmed to fit the token budget)"


def count_tokens(text: str | None) -> int:
    """Approximate tokens of one bare string (no role, no message overhead); 0 when empty."""
    if not text:
        return 0
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def count_message_tokens(messages: Iterable[BaseMessage]) -> int:
    """Approximate tokens of chat messages, as LangChain counts them."""
    return count_tokens_approximately(list(messages))


def fit_blocks(blocks: Sequence[str], budget: int, separator: str = "\n\n") -> list[str]:
    """The leading whole blocks whose joined text fits ``budget`` (never a block cut in two)."""
    kept: list[str] = []
    for block in blocks:
        if count_tokens(separator.join([*kept, block])) > budget:
            break
        kept.append(block)
    return kept


def truncate_lines(text: str, budget: int) -> str:
    """Whole lines from the top, plus a trim marker, within ``budget`` tokens (deterministic).
    When not even the first line fits, its leading words: a long first paragraph (a summary's
    narrative) is shown in part rather than not at all."""
    if count_tokens(text) <= budget:
        return text
    room = budget - count_tokens("\n" + TRIM_MARKER)
    lines = fit_blocks(text.splitlines(), room, separator="\n")
    if not lines and room > 0:
        first = text.splitlines()[0]
        head = first[: int(room * CHARS_PER_TOKEN)]
        head = head[: head.rfind(" ")] if " " in head else head
        if head.strip():
            lines = [head.rstrip()]
    return "\n".join(lines + [TRIM_MARKER])
