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
    """The reply so far of a stopped turn, with the time it was stopped (as every reply has its time)."""
    return stamp_sent_at(AIMessage(content=text, id=message_id, response_metadata={STOPPED_MARK: True}))  # type: ignore[return-value]


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


def stamp_sent_at(message: BaseMessage, when: "datetime | None" = None, *, replace: bool = False) -> BaseMessage:
    """Give ``message`` its time (now unless ``when``), keeping one it already has unless ``replace``."""
    if replace or sent_at(message) is None:
        moment = when or datetime.now(timezone.utc)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        message.response_metadata = {**(message.response_metadata or {}), SENT_AT: moment.astimezone(timezone.utc).isoformat()}
    return message


# A reply that only repeated what memory gave it (the offline model's "I know: …", a reply that
# quotes excerpts back) is marked here: it is kept in the chat, but it is no evidence about the
# user, so the index of what was said, the summary fold and extraction pass over it.
MEMORY_ECHO = "memory_echo"
# Share of a reply's content words found in what memory gave the model, past which the reply
# only repeated memory (a reply that adds a few words of its own still counts as an echo).
ECHO_SHARE = 0.8
ECHO_MIN_WORDS = 2


def is_memory_echo(message: BaseMessage | None) -> bool:
    return isinstance(message, AIMessage) and bool((message.response_metadata or {}).get(MEMORY_ECHO))


def mark_memory_echo(reply: AIMessage, memory_text: str) -> AIMessage:
    """Mark ``reply`` when nearly every content word of it was in ``memory_text`` (what the prompt's
    memory sections and summary held), so it only repeated memory."""
    from core.words import content_words  # core.words needs nltk; only replies pay for it

    said = content_words(reply.text)
    if len(said) < ECHO_MIN_WORDS or not memory_text.strip():
        return reply
    known = set(content_words(memory_text))
    if sum(w in known for w in said) / len(said) >= ECHO_SHARE:
        reply.response_metadata = {**(reply.response_metadata or {}), MEMORY_ECHO: True}
    return reply


# A note shown in place of a reply the model could not give, asked twice ("(No answer to “…”: the model only
# repeated your message back, twice. …)"). It is for the user: the model never sees it again (a small
# model copied it as its next reply), and like a memory echo it is no evidence.
NO_ANSWER = "no_answer"


def no_answer_note(note: str, *, id: str | None = None, usage_metadata=None) -> AIMessage:
    return AIMessage(content=note, id=id, usage_metadata=usage_metadata, response_metadata={NO_ANSWER: True})


def is_no_answer(message: BaseMessage | None) -> bool:
    return isinstance(message, AIMessage) and bool((message.response_metadata or {}).get(NO_ANSWER))


def without_unanswered(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` without each no-answer note and the user message it stands in for (with any
    tool steps between them). A note is the user's to read, never the model's; and a user message
    left without a reply in view made the 0.5B answer nothing usable in the turns after it."""
    out: list[BaseMessage] = []
    for message in messages:
        if not is_no_answer(message):
            out.append(message)
            continue
        asked = next((i for i in range(len(out) - 1, -1, -1) if isinstance(out[i], HumanMessage)), None)
        if asked is not None and not any(isinstance(m, AIMessage) and not m.tool_calls for m in out[asked + 1 :]):
            del out[asked:]  # the message and this turn's tool steps (its own answer never came)
    return out


def adds_no_evidence(message: BaseMessage | None) -> bool:
    """A reply that says nothing about the user: a memory echo or a no-answer note."""
    return is_memory_echo(message) or is_no_answer(message)


def unsummarized(messages: Sequence[BaseMessage], cursor: str | None) -> list[BaseMessage]:
    """Messages after the cursor (all of them when there is no cursor or it is gone)."""
    if cursor is None:
        return list(messages)
    for i, m in enumerate(messages):
        if m.id == cursor:
            return list(messages[i + 1 :])
    # The cursor message was removed (e.g. an edit forked the thread): show everything.
    return list(messages)
