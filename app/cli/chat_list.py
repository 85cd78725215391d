"""The CLI's lists of chats: one line per chat, numbered for ``/open N``, with how long ago it was active."""

from __future__ import annotations

from datetime import datetime

from core.schemas import ChatRecord, utcnow


def _ago(when: datetime, now: datetime) -> str:
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def describe(chat: ChatRecord) -> str:
    return f"'{chat.title}' ({chat.message_count} messages, {_ago(chat.last_activity, utcnow())})"


def numbered(chats: list[ChatRecord], current: str | None = None, imports: dict | None = None) -> str:
    """One line per chat, numbered from 1 (what /open N takes); the current chat is starred; a chat
    whose import is running or incomplete says so (``imports``: memory.queries.import_states)."""
    now = utcnow()
    imports = imports or {}

    def marker(chat: ChatRecord) -> str:
        row = imports.get(chat.thread_id)
        if row is None:
            return ""
        if row.state == "incomplete":
            return f"  [IMPORT INCOMPLETE: {row.imported} of {row.total} messages; `memory-agent import FILE --resume {chat.thread_id}`]"
        return f"  [importing: {row.imported} of {row.total} messages]"

    return "\n".join(
        f"{i:>2}. {'*' if c.thread_id == current else ' '} {c.title}  ({c.message_count} messages, {_ago(c.last_activity, now)}){marker(c)}"
        for i, c in enumerate(chats, start=1)
    )
