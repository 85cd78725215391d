"""Small helpers for finding the parts of a turn in the message list."""

from __future__ import annotations

from typing import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage


def last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


def current_turn(messages: Sequence[BaseMessage]) -> tuple[HumanMessage | None, AIMessage | None]:
    """The newest human message and the final AI reply after it (if any)."""
    i = last_human_index(messages)
    if i is None:
        return None, None
    reply = None
    for m in messages[i + 1 :]:
        if isinstance(m, AIMessage) and not m.tool_calls:
            reply = m
    return messages[i], reply  # type: ignore[return-value]


# A reply the user stopped mid-stream is kept with what it had said so far, marked here.
# response_metadata is ours to annotate and is never sent back to a provider.
STOPPED_MARK = "stopped_by_user"


def stopped_reply(text: str, message_id: str) -> AIMessage:
    return AIMessage(content=text, id=message_id, response_metadata={STOPPED_MARK: True})


def is_stopped(message: BaseMessage | None) -> bool:
    return isinstance(message, AIMessage) and bool(message.response_metadata.get(STOPPED_MARK))
