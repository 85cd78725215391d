"""What a chat is found by: its searchable text, and the parts a vector made from it holds.

nodes/record_chat.py writes it at every turn; memory/chat_admin.py again when a message is
deleted outright. memory/writer/records.py keeps the vector while its parts are all in the text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from langchain_core.messages import HumanMessage

from core.redaction import MARK, Redactor
from core.schemas import NEW_CHAT_TITLE, ChatRecord, SummaryBoard

RECENT_SEARCH_CHARS = 600
OPENING_SEARCH_CHARS = 300
RECENT_LINES = 6
LINE_SEPARATOR = " / "


@dataclass(frozen=True)
class SearchableText:
    """A chat's searchable text, and ``parts``: digests of its head and of each newest line as it
    was included (message id and text), which the record keeps for the vector made from it
    (memory.writer.records.vector_still_serves)."""

    text: str
    parts: tuple[str, ...]


def _digest(*fields: str) -> str:
    return hashlib.blake2b("\x00".join(fields).encode("utf-8"), digest_size=8).hexdigest()


def searchable_text(board: SummaryBoard, messages, *, title: str = "", opening: HumanMessage | None = None) -> SearchableText:
    """What a chat is found by, most telling first (the embedding reads ~256 tokens): its title,
    its opening message and the summary board once there is one (the head); then the newest user
    lines not yet folded (``messages``), the opening left out when the head holds it whole."""
    head_lines = [line] if (line := _title_line(title)) else []
    opening_text = opening.text.strip() if opening is not None else ""
    if opening_text:
        head_lines.append(f"Opening: {opening_text[:OPENING_SEARCH_CHARS]}")
    if not board.is_empty():
        head_lines.append(board.render())
    head = "\n".join(head_lines)
    whole_in_head = opening is not None and opening.id is not None and len(opening_text) <= OPENING_SEARCH_CHARS
    recent = [m for m in messages if isinstance(m, HumanMessage) and not (whole_in_head and m.id == opening.id)][-RECENT_LINES:]
    joined = LINE_SEPARATOR.join(m.text for m in recent)
    start = max(0, len(joined) - RECENT_SEARCH_CHARS)  # the oldest lines give way first
    parts, position = [_digest("head", head)], 0
    for m in recent:
        end = position + len(m.text)
        if end > start:
            parts.append(_digest("line", m.id or "", joined[max(position, start) : end]))
        position = end + len(LINE_SEPARATOR)
    tail = joined[start:]
    text = "\n".join(p for p in (head, f"Recently: {tail}" if tail else "") if p)
    return SearchableText(text, tuple(parts))


def _title_line(title: str) -> str:
    return title.strip() if title.strip() and title != NEW_CHAT_TITLE else ""


def retitled_text(text: str, old_title: str, new_title: str) -> str:
    """The searchable ``text`` with its title line (:func:`searchable_text`'s first) saying
    ``new_title``: a rename must not leave the chat found by the name it no longer has."""
    old, new = _title_line(old_title), _title_line(new_title)
    body = text[len(old) :].lstrip("\n") if old and (text == old or text.startswith(old + "\n")) else text
    return "\n".join(p for p in (new, body) if p)


def shown_title(title: str) -> str:
    """A title without the marks of what was forgotten ("" when nothing else is left)."""
    return title.replace(MARK, "").strip(" ,;:-")


def date_title(chat: ChatRecord) -> str:
    """The title of a chat whose words were all forgotten: its date."""
    return f"Chat of {chat.created_at:%-d %B %Y}"


def redact_title(chat: ChatRecord, redactor: Redactor, *, user_set_too: bool = True) -> bool:
    """Take what ``redactor`` hides out of the chat's title; a title left with nothing becomes the
    chat's date, which the agent may title again. A forget reaches a title the user set (or an
    import brought) too: it names the thing to forget everywhere. A message deleted outright does
    not (``user_set_too=False``): the user chose that title, not the message. Whether it changed."""
    if (chat.title_by_user and not user_set_too) or not redactor.carries(chat.title):
        return False
    kept = shown_title(redactor.text(chat.title))
    chat.title = kept or date_title(chat)
    chat.title_by_user = chat.title_by_user and bool(kept)
    chat.title_topics = []
    return True


def redact_record(chat: ChatRecord, redactor: Redactor) -> bool:
    """Take what ``redactor`` hides out of the record's searchable text and its title
    (:func:`redact_title`); whether anything was hidden."""
    if not (redactor.carries(chat.summary_text) or redactor.carries(chat.title)):
        return False
    redact_title(chat, redactor)
    chat.summary_text = redactor.text(chat.summary_text)
    return True
