"""Other products' chat exports, read as histories in our import format (memory.chat_import).

Two exports, as their data-export archives hold them (docs/import.md):

* **ChatGPT** ``conversations.json``: a list of conversations, each a tree of nodes
  (``mapping``: id -> {message, parent, children}) because an edited question or a
  regenerated reply starts a new branch. The conversation as the user last saw it is the
  branch from ``current_node`` up through the parents; the other branches are left out.
  Only text people saw is kept: system and tool messages, the assistant's calls to its tools
  (``recipient`` other than ``all``), hidden messages (``is_visually_hidden_from_conversation``:
  custom instructions, the empty system prompt) and content that is not text (code sent to a
  tool, browsing results, images) are skipped; a photo's caption in ``multimodal_text`` is kept.
* **Claude** ``conversations.json``: a list of ``{uuid, name, created_at, updated_at,
  chat_messages: [{sender: human|assistant, text, content: [{type, text}], created_at}]}``;
  the ``text`` blocks of ``content`` are the message (``thinking`` and tool blocks are not
  what was said), else ``text``.

Each conversation becomes one history with its title, its messages' times, the
conversation's creation time and ``source_id`` (``chatgpt:<id>`` or ``claude:<uuid>``), by
which a second import of the same export adds nothing; an export holding one id twice is read once
when the copies are the same, and refused when they differ. A conversation without any text
message (opened and left) is left out. The pydantic models below are the JSON contracts:
they name only the fields read, and ignore the many others an export carries.

This module returns plain dicts in our format; memory.chat_import validates them as any
history (the checks of a chat message, times that never go back).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.text_validation import NAME_CHARS, is_blank

__all__ = ["ChatGPTConversation", "ClaudeConversation", "export_histories", "export_kind"]

CHATGPT = "chatgpt"
# Citation marks in ChatGPT's replies that only its app renders: 【4†source】 (browsing) and the
# private-use-area ones of newer exports (U+E200 … U+E201).
_CITATION = re.compile(r"[ \t]*(?:【\d+(?::\d+)?†[^】\n]{0,80}】|\ue200[^\ue201\n]{0,200}\ue201)")
CLAUDE = "claude"


class _Export(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- ChatGPT
class ChatGPTAuthor(_Export):
    role: str = Field(description="user, assistant, system or tool.")
    name: str | None = None


class ChatGPTContent(_Export):
    content_type: str = Field(description="text and multimodal_text are read; code, execution_output, tether_* … are not.")
    parts: list[Any] | None = Field(None, description="Strings, and objects for images and other assets.")


class ChatGPTMessage(_Export):
    id: str | None = None
    author: ChatGPTAuthor
    content: ChatGPTContent
    create_time: float | None = Field(None, description="Seconds since 1970 (UTC).")
    metadata: dict[str, Any] = Field(default_factory=dict)
    recipient: str | None = Field("all", description="'all' for a message to the user; a tool's name for a call to it.")


class ChatGPTNode(_Export):
    id: str | None = None
    message: ChatGPTMessage | None = None
    parent: str | None = None
    children: list[str] = Field(default_factory=list)


class ChatGPTConversation(_Export):
    """One conversation of ChatGPT's ``conversations.json``."""

    id: str | None = None
    conversation_id: str | None = None
    title: str | None = None
    create_time: float | None = None
    update_time: float | None = None
    mapping: dict[str, ChatGPTNode]
    current_node: str | None = None


# --------------------------------------------------------------------------- Claude
class ClaudeBlock(_Export):
    type: str = Field(description="text is read; thinking, tool_use, tool_result … are not.")
    text: str | None = None


class ClaudeMessage(_Export):
    uuid: str | None = None
    sender: Literal["human", "assistant"]
    text: str | None = ""  # null in some exports: the content blocks say it
    content: list[ClaudeBlock] = Field(default_factory=list)
    created_at: datetime | None = None  # missing: dated with the message before it, as ChatGPT's are


class ClaudeConversation(_Export):
    """One conversation of Claude's ``conversations.json``."""

    uuid: str
    name: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    chat_messages: list[ClaudeMessage] = Field(default_factory=list)


# --------------------------------------------------------------------------- reading
class ExportError(ValueError):
    """The data looks like an export but a conversation does not read as one."""


def export_kind(data: Any) -> str | None:
    """``chatgpt`` or ``claude`` when ``data`` is such an export (a list of conversations, or one), else None."""
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(c, dict) for c in items):
        return None
    if all("mapping" in c for c in items):
        return CHATGPT
    if all("chat_messages" in c for c in items):
        return CLAUDE
    return None


def export_histories(data: Any) -> list[dict] | None:
    """The histories (our format, as dicts, each with ``skipped_copies``) of a ChatGPT or Claude export,
    oldest conversation first; None when ``data`` is neither. ExportError names the conversation that
    does not read, or two different conversations with one id.

    A conversation the export holds more than once (one id), the same each time (title, times and
    messages as read), is read once: ``skipped_copies`` counts the others."""
    kind = export_kind(data)
    if kind is None:
        return None
    items = data if isinstance(data, list) else [data]
    model, read = (ChatGPTConversation, _chatgpt_history) if kind == CHATGPT else (ClaudeConversation, _claude_history)
    histories = []
    first_of: dict[str, tuple[int, Any, dict]] = {}  # source id -> (position, raw, history) of its first copy
    copies: dict[str, int] = {}
    for i, raw in enumerate(items):
        try:
            conversation = model.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ExportError(f"{kind} conversation {i} ({_label(raw)}): {where}: {first['msg']}.") from None
        try:
            history = read(conversation, raw)
        except _Unreadable as exc:
            raise ExportError(f"{kind} conversation {i} ({_label(raw)}): {exc}") from None
        if not history["messages"]:
            continue
        source = history["source_id"]
        if source not in first_of:
            first_of[source] = (i, raw, history)
            histories.append(history)
            continue
        j, first_raw, first = first_of[source]
        if history != first:
            # Refused, not imported as another chat nor added to the first's: which copy is right is the user's to say,
            # and what memory learns from a wrong one stays when its chat is deleted (docs/import.md).
            raise ExportError(
                f"{kind} conversations {j} ({_label(first_raw)}) and {i} ({_label(raw)}) have the same id, {source}, but differ: an export "
                "holds each conversation once (is this file two exports joined?). Keep one of them, or import them from separate files, "
                "the older first (the newer then adds its new messages to its chat); nothing was imported."
            )
        copies[source] = copies.get(source, 0) + 1
    for history in histories:
        history["skipped_copies"] = copies.get(history["source_id"], 0)
    # Oldest first, so memory learns in the order things were said (a later fact supersedes).
    histories.sort(key=lambda h: h["created_at"] or h["messages"][0]["time"])
    return histories


def _label(raw: Any) -> str:
    if isinstance(raw, dict):
        return repr(raw.get("title") or raw.get("name") or raw.get("id") or raw.get("uuid") or "untitled")
    return type(raw).__name__


def _title(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if is_blank(value) else value[:NAME_CHARS]


def _fallback_id(raw: Any) -> str:
    """A conversation without an id is known by its content (the same export gives the same key)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:32]


class _Unreadable(ValueError):
    """A conversation that does not read as one (export_histories names it)."""


class _OutOfRange(_Unreadable):
    """A time of the export that is no date of ours."""


_RANGE = "falls outside the years 1 to 9999 in UTC."


def _utc(value: datetime, where: str) -> datetime:
    try:
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    except (OverflowError, ValueError, OSError):  # 0001-01-01T00:00:00+01:00 is in year 0 in UTC
        raise _OutOfRange(f"{where}: {value.isoformat()} {_RANGE}") from None


def _from_epoch(seconds: float | None, where: str) -> datetime | None:
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):  # 1e20, -1e13, inf, nan
        raise _OutOfRange(f"{where}: {seconds!r} seconds since 1970 {_RANGE}") from None


def current_branch(conversation: ChatGPTConversation) -> list[ChatGPTNode]:
    """The nodes from the root down to ``current_node``: the conversation as last shown."""
    nodes = conversation.mapping
    node_id = conversation.current_node
    if node_id not in nodes:
        # No current node recorded: follow the last child down from the root, as the app shows it.
        # (By its key: a node's own "id" may be missing, and None found no branch, leaving the conversation out.)
        roots = [key for key, n in nodes.items() if n.parent is None or n.parent not in nodes]
        node_id = roots[0] if roots else None
        while node_id in nodes and nodes[node_id].children:
            node_id = nodes[node_id].children[-1]
    branch: list[ChatGPTNode] = []
    seen: set[str] = set()
    while node_id in nodes and node_id not in seen:  # a cycle would be a broken export: stop there
        seen.add(node_id)
        branch.append(nodes[node_id])
        node_id = nodes[node_id].parent
    return branch[::-1]


def _chatgpt_text(message: ChatGPTMessage) -> str | None:
    """What the user saw of a message, or None for what a chat of ours would not show."""
    if message.author.role not in ("user", "assistant") or message.recipient not in (None, "all"):
        return None
    if message.metadata.get("is_visually_hidden_from_conversation"):
        return None
    if message.content.content_type not in ("text", "multimodal_text"):
        return None
    text = "\n\n".join(t for t in map(_part_text, message.content.parts or []) if t and not is_blank(t))
    if message.author.role == "assistant":
        text = _CITATION.sub("", text)
    return None if is_blank(text) else text.strip()  # a message that shows nothing, as a chat of ours would refuse it


def _part_text(part: Any) -> str | None:
    """A part's text: a string, or what was said in a voice conversation (``audio_transcription``)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("content_type") == "audio_transcription" and isinstance(part.get("text"), str):
        return part["text"]
    return None  # an image, an audio file, another asset


def _message_times(
    own: list[datetime | None], start: datetime | None, end: Callable[[], datetime | None], *, from_start: bool = True
) -> list[datetime]:
    """Each kept message's time: its own; without one, the one before it's. The first, without one, takes
    the conversation's ``start``, else the first later message's time (it was said no later), else
    ``end`` (the conversation's last update: the only time it has). Never earlier than the one before
    (clock skew), nor, ``from_start``, than ``start`` (ChatGPT's, as ever; Claude's keep their own times).
    No time anywhere: _Unreadable (never "now")."""
    first = start or next((t for t in own if t is not None), None) or (end() if own else None)
    if first is None and own:
        raise _Unreadable("no message has a time, and neither has the conversation.")
    last = first if from_start else None
    times = []
    for t in own:
        last = (t if last is None else max(t, last)) if t is not None else (last or first)
        times.append(last)
    return times


def _chatgpt_history(conversation: ChatGPTConversation, raw: Any) -> dict:
    created = _from_epoch(conversation.create_time, "create_time")
    kept = []  # (node, message, text) of what the user saw
    for node in current_branch(conversation):
        text = _chatgpt_text(node.message) if node.message is not None else None
        if text is not None:
            kept.append((node, node.message, text))
    own = [_from_epoch(m.create_time, f"mapping.{node.id}.message.create_time") for node, m, _ in kept]
    times = _message_times(own, created, lambda: _from_epoch(conversation.update_time, "update_time"))
    messages = [
        {"role": m.author.role, "text": text, "time": when, "source_id": m.id or node.id} for (node, m, text), when in zip(kept, times)
    ]
    key = conversation.id or conversation.conversation_id or _fallback_id(raw)
    return {"title": _title(conversation.title), "messages": messages, "created_at": created, "source_id": f"{CHATGPT}:{key}"}


def _claude_text(message: ClaudeMessage) -> str | None:
    blocks = [b.text for b in message.content if b.type == "text" and b.text]
    text = "\n\n".join(blocks) if blocks else message.text
    return None if is_blank(text or "") else text.strip()


def _claude_history(conversation: ClaudeConversation, raw: Any) -> dict:
    created = _utc(conversation.created_at, "created_at") if conversation.created_at else None
    kept = [(i, m, text) for i, m in enumerate(conversation.chat_messages) if (text := _claude_text(m)) is not None]  # a reply whose stream failed has no text
    own = [_utc(m.created_at, f"chat_messages.{i}.created_at") if m.created_at else None for i, m, _ in kept]
    updated = lambda: _utc(conversation.updated_at, "updated_at") if conversation.updated_at else None  # noqa: E731
    times = _message_times(own, created, updated, from_start=False)  # as ChatGPT's, but a message before created_at keeps its time
    messages = [
        {"role": "user" if m.sender == "human" else "assistant", "text": text, "time": when, "source_id": m.uuid}
        for (_, m, text), when in zip(kept, times)
    ]
    return {"title": _title(conversation.name), "messages": messages, "created_at": created, "source_id": f"{CLAUDE}:{conversation.uuid}"}
