"""Approximate token counts for cost figures.

These are APPROXIMATIONS, not real tokenizer counts: tiktoken cannot download
its encodings offline here, so we use the same heuristic as
``langchain_core.messages.utils.count_tokens_approximately``: about 4
characters per token, rounded up. ``count_tokens(text)`` applies it to one
bare string (no role name and no per-message overhead);
``count_message_tokens(messages)`` calls LangChain's function itself, which
adds the role and 3 extra tokens per message.

Good enough to compare variants ("summary uses ~1.8k tokens per query vs.
~26k for full context"); do not bill anyone with it. Real tokenizers differ,
most for code, numbers and non-Latin scripts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["CHARS_PER_TOKEN", "count_tokens", "count_message_tokens"]

#: LangChain's default for ``count_tokens_approximately``.
CHARS_PER_TOKEN: float = 4.0


def count_tokens(text: str | None, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """Approximate tokens in one string: ``ceil(len(text) / chars_per_token)``; 0 for empty/None."""
    if not text:
        return 0
    if chars_per_token <= 0:
        raise ValueError("chars_per_token must be > 0")
    return math.ceil(len(text) / chars_per_token)


def count_message_tokens(messages: Iterable[Any], **kwargs: Any) -> int:
    """Approximate tokens of chat messages via LangChain's ``count_tokens_approximately``."""
    from langchain_core.messages.utils import count_tokens_approximately

    return count_tokens_approximately(list(messages), **kwargs)
