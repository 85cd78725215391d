"""Importing a chat history into a new chat, running the memory nodes as the chat would.

Formats (docs/import.md); the other products' exports (ChatGPT's and Claude's
``conversations.json``) are read by memory.import_formats into ours:

* ours, :class:`ChatImport`: ``{"title": "...", "messages": [{"role": "user"|"assistant",
  "text": "...", "time": "2023-05-08T13:56:00Z"}, ...]}``;
* LoCoMo's (one sample of ``locomo10.json``: ``conversation`` with ``speaker_a``, ``speaker_b``,
  ``session_N`` and ``session_N_date_time``): speaker A's turns become user messages and
  speaker B's assistant messages, each prefixed with the speaker's name ("Caroline: ..."),
  because two people talk and a question names them; a shared image's caption is appended as
  ``[shared <caption>]``. A session's turns are dated at the session's time plus one minute per
  turn (LoCoMo dates sessions only).

Every message is validated before anything is written (the checks of a chat message:
``core.text_validation.validate_user_text``); a bad one is refused with its position and
nothing is created. Then the chat is created with its owner (``storage.thread_owners``) and
its record, and each exchange (the user's message(s) and the assistant message(s) after them)
is written as if the ``reply`` node had produced it (``update_state(..., as_node="reply")``);
the graph then continues from there, so ``summarize``, ``extract_memories`` and every step
after ``reply`` run exactly as after a chat turn. The graph is passed in (this layer sits
below the assembly).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.context import Context
from core.errors import InvalidMessage, MemoryAgentError
from core.messages import stamp_sent_at
from core.schemas import ChatRecord
from core.text_validation import DEFAULT_MAX_CHARS, ShortText, validate_user_text
from memory.import_formats import ExportError, export_histories
from memory.memory_writer import create_chat_record
from storage import chat_sources, thread_owners

__all__ = [
    "ChatImport",
    "ImportFailed",
    "ImportedChat",
    "ImportedMessage",
    "InvalidImport",
    "check_all",
    "LocomoSample",
    "import_chat",
    "locomo_chat",
    "parse_import",
]

LOCOMO_TURN_SPACING = timedelta(minutes=1)
LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION = re.compile(r"session_(\d+)")


class InvalidImport(MemoryAgentError, ValueError):
    """The file or body is not an importable history; nothing was written."""


class ImportFailed(MemoryAgentError):
    """The import stopped part way; the message says how far it got and which chat holds it."""

    def __init__(self, message: str, *, chat_id: str, imported: int) -> None:
        super().__init__(message)
        self.chat_id = chat_id
        self.imported = imported


class ImportedMessage(BaseModel):
    """One message of an imported history."""

    role: Literal["user", "assistant"]
    text: str = Field(description="The message's text (the limits and checks of a chat message apply).")
    time: datetime = Field(description="When it was said, ISO 8601; without a zone it is taken as UTC.")
    source_id: str | None = Field(None, description="The source's id of the message (LoCoMo's dia_id), for reference.")

    @field_validator("time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


class ChatImport(BaseModel):
    """A chat history to import: messages in the order they were said, with their times."""

    title: ShortText | None = Field(None, description="The chat's title (default: generated as for any chat).")
    messages: list[ImportedMessage] = Field(min_length=1)
    source_id: str | None = Field(
        None, max_length=300, description="The source's id of the conversation: a history with a source_id the user already imported adds nothing."
    )
    created_at: datetime | None = Field(None, description="When the conversation was started (default: its first message's time).")


class LocomoSample(BaseModel):
    """One LoCoMo sample (``locomo10.json``'s items): its ``conversation`` is read by :func:`locomo_chat`."""

    model_config = ConfigDict(extra="allow")

    conversation: dict[str, Any] = Field(description="speaker_a, speaker_b, session_N (turns: speaker, text, dia_id) and session_N_date_time.")
    sample_id: str | None = None


@dataclass
class ImportedChat:
    chat_id: str
    title: str
    messages: int
    exchanges: int
    first_time: datetime | None = None
    last_time: datetime | None = None
    id_map: dict[str, str] = field(default_factory=dict)  # source_id -> message id in the chat
    already_imported: bool = False  # the chat held this source_id before: nothing was added


# --------------------------------------------------------------------------- formats
def _locomo_time(raw: Any, session: int) -> datetime:
    try:
        return datetime.strptime(str(raw).strip(), LOCOMO_DATE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise InvalidImport(f"session_{session}_date_time {raw!r} is not a LoCoMo date like '1:56 pm on 8 May, 2023'.") from None


def locomo_chat(sample: dict[str, Any], *, title: str | None = None) -> ChatImport:
    """One LoCoMo sample as a ChatImport (speaker A → user, speaker B → assistant; see the module doc)."""
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise InvalidImport("A LoCoMo sample needs a 'conversation' object.")
    a, b = conv.get("speaker_a"), conv.get("speaker_b")
    if not a or not b:
        raise InvalidImport("A LoCoMo conversation needs 'speaker_a' and 'speaker_b'.")
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)))
    messages: list[dict] = []
    for n in numbers:
        turns = conv[f"session_{n}"] or []
        if not turns:
            continue
        start = _locomo_time(conv.get(f"session_{n}_date_time"), n)
        for i, turn in enumerate(turns):
            speaker = turn.get("speaker")
            if speaker not in (a, b):
                raise InvalidImport(f"session_{n} turn {i + 1}: speaker {speaker!r} is neither speaker_a ({a}) nor speaker_b ({b}).")
            text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text = f"{text} [shared {turn['blip_caption']}]".strip()
            messages.append(
                {
                    "role": "user" if speaker == a else "assistant",
                    "text": f"{speaker}: {text}",
                    "time": start + i * LOCOMO_TURN_SPACING,
                    "source_id": turn.get("dia_id"),
                }
            )
    if not messages:
        raise InvalidImport("The LoCoMo conversation has no turns.")
    return _validated({"title": title or f"{a} and {b}", "messages": messages})


def _validated(data: Any) -> ChatImport:
    try:
        return ChatImport.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidImport(f"{where}: {first['msg']} ({exc.error_count()} problem(s) in all).") from None


def is_locomo(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("conversation"), dict)


def parse_import(data: Any, *, title: str | None = None) -> list[ChatImport]:
    """The chats in ``data``: our format, one LoCoMo sample, a list of LoCoMo samples, or a ChatGPT or Claude export."""
    try:
        exported = export_histories(data)  # None: not an export
    except ExportError as exc:
        raise InvalidImport(str(exc)) from None
    if exported is not None:
        return _exported_chats(exported, title)
    if isinstance(data, list) and data and all(is_locomo(d) for d in data):
        return [locomo_chat(d, title=f"{title} ({i + 1})" if title and len(data) > 1 else title) for i, d in enumerate(data)]
    if is_locomo(data):
        return [locomo_chat(data, title=title)]
    if isinstance(data, dict) and "messages" in data:
        chat = _validated(data)
        if title:
            chat.title = title
        return [chat]
    raise InvalidImport(
        "Not an importable history: expected {\"messages\": [{\"role\", \"text\", \"time\"}, ...]} "
        "LoCoMo's format (a sample with 'conversation', or a list of them), or a ChatGPT or Claude conversations.json. See docs/import.md."
    )


def _exported_chats(histories: list[dict], title: str | None) -> list[ChatImport]:
    if not histories:
        raise InvalidImport("The export holds no conversation with a text message.")
    chats = []
    for i, history in enumerate(histories):
        named = f"{title} ({i + 1})" if title and len(histories) > 1 else title or history["title"]
        try:
            chats.append(_validated({**history, "title": named}))
        except InvalidImport as exc:
            raise InvalidImport(f"{_which(history)}: {exc}") from None
    return chats


def _which(chat: ChatImport | dict) -> str:
    """A conversation of a multi-chat import, named in an error."""
    get = chat.get if isinstance(chat, dict) else lambda k: getattr(chat, k)
    return f"conversation {get('source_id') or ''} {get('title') or 'untitled'!r}".replace("  ", " ")


def check_all(chats: list[ChatImport], max_chars: int = DEFAULT_MAX_CHARS) -> None:
    """:func:`check_messages` on every chat before any is imported; the error names the chat when there are several."""
    for chat in chats:
        try:
            check_messages(chat, max_chars)
        except InvalidImport as exc:
            raise InvalidImport(f"{_which(chat)}: {exc}" if len(chats) > 1 else str(exc)) from None


def check_messages(chat: ChatImport, max_chars: int = DEFAULT_MAX_CHARS) -> None:
    """Every message as a chat message is checked, and times never go back; InvalidImport names the first bad one."""
    previous: datetime | None = None
    for i, m in enumerate(chat.messages):
        try:
            validate_user_text(m.text, max_chars)
        except InvalidMessage as exc:
            raise InvalidImport(f"messages.{i} ({m.role}, {m.time.isoformat()}): {exc}") from None
        if previous is not None and m.time < previous:
            raise InvalidImport(f"messages.{i}: its time {m.time.isoformat()} is earlier than the message before it ({previous.isoformat()}); give the messages in the order they were said.")
        previous = m.time


def exchanges(messages: list[ImportedMessage]) -> list[list[ImportedMessage]]:
    """Groups as turns of a chat: the user's message(s), then the assistant's message(s) after them."""
    groups: list[list[ImportedMessage]] = []
    for m in messages:
        starts_turn = m.role == "user" and (not groups or groups[-1][-1].role == "assistant")
        if starts_turn or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return groups


def _message(m: ImportedMessage) -> BaseMessage:
    cls = HumanMessage if m.role == "user" else AIMessage
    return stamp_sent_at(cls(m.text, id=str(uuid.uuid4())), m.time)


Progress = Callable[[int, int], Awaitable[None] | None]


# --------------------------------------------------------------------------- running it
async def import_chat(
    graph,
    pool,
    user_id: str,
    chat: ChatImport,
    *,
    context: Context | None = None,
    on_progress: Progress | None = None,
) -> ImportedChat:
    """Import ``chat`` into a new chat of ``user_id`` on the compiled ``graph`` (with its checkpointer and store).

    Validation first (InvalidImport, nothing written). A failure part way raises ImportFailed
    saying how many messages the new chat holds by then.
    """
    ctx = context or Context(user_id=user_id)
    if ctx.user_id != user_id:
        raise ValueError("the context's user_id must be the importing user")
    check_messages(chat, ctx.max_message_chars)
    groups = exchanges(chat.messages)
    title = (chat.title or "").strip()
    record = ChatRecord(thread_id=str(uuid.uuid4()), title=title or "New chat", title_by_user=bool(title), persona=ctx.persona,
                        created_at=chat.created_at or chat.messages[0].time)
    try:
        if chat.source_id is None:
            await thread_owners.create(pool, record.thread_id, user_id)
        else:
            await chat_sources.create_imported_thread(pool, record.thread_id, user_id, chat.source_id)
    except chat_sources.AlreadyImported as exc:  # nothing written
        return ImportedChat(chat_id=exc.thread_id, title=title, messages=0, exchanges=0, already_imported=True)
    await create_chat_record(graph.store, user_id, record)
    cfg = {"configurable": {"thread_id": record.thread_id}}
    result = ImportedChat(
        chat_id=record.thread_id,
        title=record.title,
        messages=0,
        exchanges=len(groups),
        first_time=chat.messages[0].time,
        last_time=chat.messages[-1].time,
    )
    try:
        # An empty checkpoint first, as a chat's first turn has: "before the first message" to fork from.
        await graph.aupdate_state(cfg, {"messages": []}, as_node="extract_memories")
        user_turns = 0
        for group in groups:
            messages = [_message(m) for m in group]
            for source, message in zip(group, messages):
                if source.source_id:
                    result.id_map[source.source_id] = message.id
            user_turns += any(m.role == "user" for m in group)
            # As load_context would count the turn, and reply answer it; then the graph goes on
            # to summarize, extract_memories and every step after reply.
            await graph.aupdate_state(cfg, {"messages": messages, "user_turns": user_turns}, as_node="reply")
            await graph.ainvoke(None, cfg, context=ctx)
            result.messages += len(messages)
            if on_progress is not None:
                maybe = on_progress(result.messages, len(chat.messages))
                if maybe is not None:
                    await maybe
    except Exception as exc:
        raise ImportFailed(
            f"The import stopped after {result.messages} of {len(chat.messages)} messages ({type(exc).__name__}: {exc}); "
            f"chat {record.thread_id} holds those, with their memory updates. Delete it and import again.",
            chat_id=record.thread_id,
            imported=result.messages,
        ) from exc
    return result
