"""Two views of one thread: the full history (``messages``) and what the model sees.

The model sees the running summary plus the messages after the summary's cursor.
When those grow past ``summary_window`` messages or ``max_context_tokens`` tokens,
the oldest are folded into the summary and the newest ``tail_size`` stay raw.

Rules the fold obeys:
- never split an AI message that calls tools from its tool results;
- never fold the newest human message (nor anything after it);
- the fold is incremental: only the folded messages go to the summarizer.
"""

from __future__ import annotations

from typing import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from core.messages import unsummarized
from core.tokens import count_message_tokens


def _last_human_index(messages: Sequence[BaseMessage]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return len(messages)


def safe_cut(pending: Sequence[BaseMessage], cut: int) -> int:
    """Move ``cut`` earlier until folding ``pending[:cut]`` splits no tool-call pair."""
    cut = max(0, min(cut, len(pending)))
    while 0 < cut < len(pending):
        head_last = pending[cut - 1]
        tail_first = pending[cut]
        if isinstance(tail_first, ToolMessage):
            cut -= 1  # its tool call is in the folded part
        elif isinstance(head_last, AIMessage) and head_last.tool_calls:
            cut -= 1  # its results would stay raw
        else:
            break
    return cut


def plan_fold(
    messages: Sequence[BaseMessage],
    cursor: str | None,
    *,
    window: int,
    tail: int,
    max_tokens: int,
) -> list[BaseMessage]:
    """The messages to fold now (oldest first), or [] when no fold is due."""
    pending = unsummarized(messages, cursor)
    too_many = len(pending) > window
    too_big = count_message_tokens(pending) > max_tokens
    if not (too_many or too_big):
        return []
    limit = _last_human_index(pending)  # the newest human message and after stay raw
    cut = max(0, len(pending) - tail)  # fewer than ``tail`` pending (a token-budget fold): start at 0, not negative
    if too_big:
        # Fold more when the tail alone is still over budget, but keep at least the newest human turn.
        while cut < limit and count_message_tokens(pending[cut:]) > max_tokens:
            cut += 1
    cut = safe_cut(pending, min(cut, limit))
    return list(pending[:cut]) if cut > 0 else []


def model_view(messages: Sequence[BaseMessage], cursor: str | None) -> list[BaseMessage]:
    """What the model is shown of the history (the summary goes in its own section)."""
    return unsummarized(messages, cursor)
