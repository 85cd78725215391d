"""Small helpers for finding the parts of a turn in the message list."""

from __future__ import annotations

from datetime import datetime, timezone
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


# Every message carries the time it was said, as ISO 8601 UTC in response_metadata (ours to
# annotate, never sent to a provider): the episodic index, the API, the page, the CLI and the
# excerpts the model sees read it from here. An import stamps the source's own times.
SENT_AT = "sent_at"


def sent_at(message: BaseMessage) -> "datetime | None":
    """When the message was said, or None for a message from before times were kept."""
    raw = (message.response_metadata or {}).get(SENT_AT)
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(str(raw))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def stamp_sent_at(message: BaseMessage, when: "datetime | None" = None) -> BaseMessage:
    """Give ``message`` its time (now unless ``when``), keeping one it already has."""
    if sent_at(message) is None:
        moment = when or datetime.now(timezone.utc)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        message.response_metadata = {**(message.response_metadata or {}), SENT_AT: moment.astimezone(timezone.utc).isoformat()}
    return message
