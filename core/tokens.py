"""Token counting for budgets and cost figures.

tiktoken cannot fetch its encodings offline, so budgets use langchain-core's
approximate counter (about four characters a token, plus per-message overhead).
The same counter is used everywhere, so comparisons between views are fair.
"""

from __future__ import annotations

from typing import Sequence

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately


def count_tokens(text: str) -> int:
    if not text:
        return 0
    return max(1, round(len(text) / 4))


def count_message_tokens(messages: Sequence[BaseMessage]) -> int:
    return count_tokens_approximately(list(messages))


def truncate_lines(text: str, budget: int) -> str:
    """Keep whole lines from the top until the budget is spent (deterministic)."""
    if count_tokens(text) <= budget:
        return text
    kept: list[str] = []
    used = 0
    for line in text.splitlines():
        cost = count_tokens(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept + ["…(trimmed to fit the token budget)"])
