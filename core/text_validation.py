"""Checks on a user message before it may enter a thread."""

from __future__ import annotations

from core.errors import InvalidMessage

DEFAULT_MAX_CHARS = 20000


def validate_user_text(text: object, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Return the message, or raise InvalidMessage with a precise reason."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidMessage(f"The message is not valid UTF-8 (bad byte at position {exc.start}).") from exc
    if not isinstance(text, str):
        raise InvalidMessage(f"The message must be text, not {type(text).__name__}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"The message contains characters that are not valid Unicode (position {exc.start}).") from exc
    if "\x00" in text:
        raise InvalidMessage("The message contains a NUL character, which cannot be stored.")
    if not text.strip():
        raise InvalidMessage("The message is empty.")
    if len(text) > max_chars:
        raise InvalidMessage(
            f"The message is too long: {len(text):,} characters, the limit is {max_chars:,} "
            "(Context.max_message_chars). Split it, or ingest it as a document with `memory-agent ingest`."
        )
    return text
