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

Bytes are read within limits (:func:`read_import`: bytes, JSON values and depth, messages;
``core.bounded_json``), and every message is validated before anything is written (the checks
of a chat message: ``core.text_validation.validate_user_text``); a bad one is refused with its
position and nothing is created. Running the import (the chat, its owner and import rows, each
exchange written as if the ``reply`` node had produced it and the memory nodes after it,
cancellation, resume) is memory.import_job's (``import_chat``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Awaitable, Callable, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError

from core.bounded_json import InvalidJson, JsonTooLarge, loads_bounded
from core.errors import InvalidMessage, MemoryAgentError
from core.text_validation import DEFAULT_MAX_CHARS, NAME_CHARS, ShortText, StorableText, is_blank, unstorable_reason, validate_user_text
from memory.import_formats import ExportError, export_histories

__all__ = [
    "ChatImport",
    "ImportFailed",
    "ImportTooLarge",
    "ImportedChat",
    "ImportedMessage",
    "InvalidImport",
    "check_all",
    "LocomoSample",
    "locomo_chat",
    "parse_import",
    "prepare_import",
    "read_import",
]

# Limits of one import (docs/import.md), checked before any work starts: the body or file's bytes,
# the JSON values it may build (a message of ours is 5 to 9; room for richer export formats), the
# messages of one chat. 5,000 messages take about 25 min with the offline model on 2 cores.
MAX_IMPORT_BYTES = 32_000_000
MAX_IMPORT_MESSAGES = 5_000
MAX_IMPORT_VALUES = 100 * MAX_IMPORT_MESSAGES
SOURCE_ID_CHARS = 300  # a conversation's or a message's id where it came from (ChatGPT's, Claude's: a UUID)
LOCOMO_TURN_SPACING = timedelta(minutes=1)
LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION = re.compile(r"session_([0-9]+)")  # ASCII digits: int() of "١" would name a key the body lacks


# How far ahead of this server's clock an imported time may be: the exporting machine's clock may run
# a little ahead; a later time is a wrong one, which would date "tomorrow" from a day to come.
IMPORT_CLOCK_SKEW = timedelta(minutes=10)


class InvalidImport(MemoryAgentError, ValueError):
    """The file or body is not an importable history; nothing was written."""


class ImportTooLarge(InvalidImport):
    """Over one of the limits (bytes, JSON values, messages); nothing was written."""


class ImportFailed(MemoryAgentError):
    """The import stopped part way; the message says how far it got and which chat holds it."""

    def __init__(self, message: str, *, chat_id: str, imported: int) -> None:
        super().__init__(message)
        self.chat_id = chat_id
        self.imported = imported


def _iso_text(value: Any) -> Any:
    """A time is ISO 8601 text: a number is refused, which pydantic would read as seconds or, past
    about 2e10, milliseconds (253402300800, the end of 9999 in seconds, became 1978)."""
    if isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?\s*", value, re.I)):
        raise ValueError("a time is ISO 8601 text with its separators, like 2023-05-08T13:56:00Z; a bare number (seconds? milliseconds? 20230508?) is not read")
    return value


def _in_utc(value: datetime) -> datetime:
    """A time in UTC (without a zone: taken as UTC); ValueError (a validation error) outside the years 1 to 9999."""
    try:
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-23:59 is in year 10000 in UTC
        raise ValueError("the time in UTC falls outside the years 1 to 9999") from None


ImportTime = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_in_utc)]
"""An imported time: ISO 8601 text, in UTC (without a zone: taken as UTC), within the years 1 to 9999."""


class ImportedMessage(BaseModel):
    """One message of an imported history."""

    role: Literal["user", "assistant"]
    text: str = Field(description="The message's text (the limits and checks of a chat message apply).")
    time: ImportTime = Field(description="When it was said, ISO 8601; without a zone it is taken as UTC.")
    source_id: StorableText | None = Field(None, max_length=SOURCE_ID_CHARS, description="The source's id of the message (LoCoMo's dia_id), for reference.")


class ChatImport(BaseModel):
    """A chat history to import: messages in the order they were said, with their times."""

    title: ShortText | None = Field(None, description="The chat's title (default: generated as for any chat).")
    messages: list[ImportedMessage] = Field(min_length=1, max_length=MAX_IMPORT_MESSAGES)
    source_id: StorableText | None = Field(
        None, max_length=SOURCE_ID_CHARS, description="The source's id of the conversation: a history with a source_id the user already imported adds nothing."
    )
    created_at: ImportTime | None = Field(None, description="When the conversation was started (default: its first message's time).")
    _skipped_copies: int = PrivateAttr(0)
    _from_export: bool = PrivateAttr(False)
    _split_messages: int = PrivateAttr(0)

    @property
    def split_messages(self) -> int:
        """Messages over the message limit that :func:`check_messages` split into parts (see :func:`in_parts`)."""
        return self._split_messages

    @property
    def skipped_copies(self) -> int:
        """Identical copies of this conversation its export also held, not imported (memory.import_formats.export_histories)."""
        return self._skipped_copies

    @property
    def from_export(self) -> bool:
        """Read from a ChatGPT or Claude export (whose import answers per conversation), not our format,
        even when ours names the same key as its source_id ("chatgpt:…")."""
        return self._from_export


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
    id_map: dict[str, str] = field(default_factory=dict)  # source_id -> message id in the chat (a source_id given twice: its first)
    already_imported: bool = False  # the chat held this source_id before: nothing was added
    not_added: str | None = None  # (already imported) the export holds messages the chat lacks, not added: chat_changed | message_differs | chat_busy | import_in_progress | import_incomplete
    not_added_reason: str | None = None  # why, in a sentence: what the user can do
    held_before: int = 0  # a grown conversation: the messages its chat held before this import added the rest


# --------------------------------------------------------------------------- formats
def _locomo_time(raw: Any, session: str) -> datetime:
    try:
        return datetime.strptime(str(raw).strip(), LOCOMO_DATE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise InvalidImport(f"{session}_date_time {raw!r} is not a LoCoMo date like '1:56 pm on 8 May, 2023'.") from None


def _turn_time(start: datetime, i: int, session: str) -> datetime:
    try:
        return start + i * LOCOMO_TURN_SPACING
    except OverflowError:
        raise InvalidImport(f"{session} turn {i + 1}: its time falls after the year 9999.") from None


def locomo_chat(sample: dict[str, Any], *, title: str | None = None) -> ChatImport:
    """One LoCoMo sample as a ChatImport (speaker A → user, speaker B → assistant; see the module doc)."""
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise InvalidImport("A LoCoMo sample needs a 'conversation' object.")
    a, b = conv.get("speaker_a"), conv.get("speaker_b")
    if not (isinstance(a, str) and a.strip() and isinstance(b, str) and b.strip()):
        raise InvalidImport("A LoCoMo conversation needs 'speaker_a' and 'speaker_b', each a name.")
    keys: dict[int, str] = {}  # session number -> its key as written ("session_01" is session 1)
    for key in conv:
        if m := _SESSION.fullmatch(key):
            if (n := int(m.group(1))) in keys:
                raise InvalidImport(f"{keys[n]} and {key} are both session {n}.")
            keys[n] = key
    sessions = {keys[n]: conv[keys[n]] or [] for n in sorted(keys)}
    for key, turns in sessions.items():
        if not isinstance(turns, list):
            raise InvalidImport(f"{key} must be a list of turns, not {type(turns).__name__}.")
    count = sum(len(turns) for turns in sessions.values())
    if count > MAX_IMPORT_MESSAGES:
        raise ImportTooLarge(f"The LoCoMo conversation has {count:,} turns; an import takes at most {MAX_IMPORT_MESSAGES:,} messages.")
    messages: list[dict] = []
    for key, turns in sessions.items():
        if not turns:
            continue
        start = _locomo_time(conv.get(f"{key}_date_time"), key)
        for i, turn in enumerate(turns):
            where = f"{key} turn {i + 1}"
            if not isinstance(turn, dict):
                raise InvalidImport(f"{where} must be an object with speaker and text, not {type(turn).__name__}.")
            speaker = turn.get("speaker")
            if speaker not in (a, b):
                raise InvalidImport(f"{where}: speaker {speaker!r} is neither speaker_a ({a}) nor speaker_b ({b}).")
            said, caption = turn.get("text", ""), turn.get("blip_caption") or ""
            for name, value in (("text", said), ("blip_caption", caption)):
                if not isinstance(value, str):  # str() of it would import "Ann: None"
                    raise InvalidImport(f"{where}: {name} must be a string, not {type(value).__name__}.")
            text = f"{said} [shared {caption}]".strip() if caption else said
            if is_blank(text):  # "Ann: " is not blank, so the message check would not see it
                raise InvalidImport(f"{where} says nothing (no text and no photo caption).")
            messages.append(
                {
                    "role": "user" if speaker == a else "assistant",
                    "text": f"{speaker}: {text}",
                    "time": _turn_time(start, i, key),
                    "source_id": turn.get("dia_id"),
                }
            )
    if not messages:
        raise InvalidImport("The LoCoMo conversation has no turns.")
    return _validated({"title": title or f"{a} and {b}", "messages": messages})


def _validated(data: Any) -> ChatImport:
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list) and len(messages) > MAX_IMPORT_MESSAGES:
        raise ImportTooLarge(f"The history has {len(messages):,} messages; an import takes at most {MAX_IMPORT_MESSAGES:,}.")
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
        chat = _validated(data)  # over MAX_IMPORT_MESSAGES: ImportTooLarge
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
            chat = _validated({**history, "title": named})
        except InvalidImport as exc:  # ImportTooLarge stays one (413)
            raise type(exc)(f"{_which(history)}: {exc}") from None
        chat._skipped_copies = history["skipped_copies"]
        chat._from_export = True
        chats.append(chat)
    return chats


def _which(chat: ChatImport | dict) -> str:
    """A conversation of a multi-chat import, named in an error."""
    get = chat.get if isinstance(chat, dict) else lambda k: getattr(chat, k)
    source = get("source_id") or ""
    source = repr(source) if unstorable_reason(source) else source  # a NUL is shown as \x00
    return f"conversation {source} {get('title') or 'untitled'!r}".replace("  ", " ")


def check_all(chats: list[ChatImport], max_chars: int = DEFAULT_MAX_CHARS) -> None:
    """:func:`check_messages` on every chat before any is imported; the error names the chat when there are several."""
    for chat in chats:
        try:
            check_messages(chat, max_chars)
        except InvalidImport as exc:
            raise InvalidImport(f"{_which(chat)}: {exc}" if len(chats) > 1 else str(exc)) from None


# Where a long message is cut into parts, best first: a paragraph, a line, a sentence, a word.
_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"[.!?…。！？][\"'”’)\]]*\s"), re.compile(r"\s"))


def in_parts(text: str, max_chars: int) -> list[str]:
    """``text`` as parts of at most ``max_chars`` characters that join back into it (its trailing
    spaces aside), each cut at the last paragraph break of its second half, else a line break, a
    sentence's end, a space, else at the limit (never inside a surrogate pair: str holds code points)."""
    text = text.rstrip()
    parts: list[str] = []
    while len(text) > max_chars:
        window = text[: max_chars + 1]  # a break just past the limit is still a cut within it
        cut = max_chars
        for pattern in _BREAKS:
            ends = [m.end() for m in pattern.finditer(window, max_chars // 2) if m.end() <= max_chars]
            if ends:
                cut = ends[-1]
                break
        parts.append(text[:cut])
        text = text[cut:]
    return [*parts, text] if text else parts


def _split_long(chat: ChatImport, max_chars: int) -> None:
    """Each message over ``max_chars`` becomes consecutive messages of the same role, time and
    source id, in parts (:func:`in_parts`): a history holds what was said, and one pasted log in an
    export refused the whole export (a typed message over the limit is refused: its writer can split it)."""
    if all(len(m.text) <= max_chars for m in chat.messages):
        return
    messages: list[ImportedMessage] = []
    for m in chat.messages:
        if len(m.text) <= max_chars or unstorable_reason(m.text) is not None or is_blank(m.text):
            messages.append(m)  # (a message that is no text is refused below, as it is)
            continue
        messages += [m.model_copy(update={"text": part}) for part in in_parts(m.text, max_chars)]
        chat._split_messages += 1
    if len(messages) > MAX_IMPORT_MESSAGES:
        raise ImportTooLarge(
            f"The history has {len(messages):,} messages once its {chat._split_messages:,} over {max_chars:,} characters are "
            f"split into parts; an import takes at most {MAX_IMPORT_MESSAGES:,}."
        )
    chat.messages = messages


def check_messages(chat: ChatImport, max_chars: int = DEFAULT_MAX_CHARS) -> None:
    """Every message as a chat message is checked, and times never go back nor pass now; InvalidImport names the first bad one.
    So are the other texts to be stored (the title, the ids), also when set after validation (the CLI's --title).
    A blank title (spaces, or only invisible characters) is no title: the chat is titled as any chat is.
    A message over ``max_chars`` is split into parts first (:func:`_split_long`)."""
    _split_long(chat, max_chars)
    if chat.title is not None and is_blank(chat.title):
        chat.title = None  # (create_chat_record refuses a blank title: after the chat's rows, it left a chat no list showed)
    _check_stored("title", chat.title, NAME_CHARS)
    _check_stored("source_id", chat.source_id, SOURCE_ID_CHARS)
    latest = datetime.now(timezone.utc) + IMPORT_CLOCK_SKEW
    for where, when in [("created_at", chat.created_at), *((f"messages.{i}", m.time) for i, m in enumerate(chat.messages))]:
        if when is not None and when > latest:
            raise InvalidImport(f"{where}: its time {when.isoformat()} is in the future (now is {datetime.now(timezone.utc):%Y-%m-%dT%H:%M}Z); a history holds what was already said.")
    previous: datetime | None = None
    for i, m in enumerate(chat.messages):
        _check_stored(f"messages.{i}.source_id", m.source_id, SOURCE_ID_CHARS)
        try:
            validate_user_text(m.text, max_chars)
        except InvalidMessage as exc:
            raise InvalidImport(f"messages.{i} ({m.role}, {m.time.isoformat()}): {exc}") from None
        if previous is not None and m.time < previous:
            raise InvalidImport(f"messages.{i}: its time {m.time.isoformat()} is earlier than the message before it ({previous.isoformat()}); give the messages in the order they were said.")
        previous = m.time


def _check_stored(where: str, value: str | None, max_chars: int) -> None:
    if value is None:
        return
    reason = unstorable_reason(value)
    if reason is not None:
        raise InvalidImport(f"{where}: the text {reason}.")
    if len(value) > max_chars:
        raise InvalidImport(f"{where}: it is {len(value):,} characters long; the limit is {max_chars:,}.")


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


def read_import(raw: bytes | str, *, title: str | None = None) -> list[ChatImport]:
    """The chats in a file's or a body's bytes, read within the limits (ImportTooLarge) before
    anything is built beyond them: a deeply nested or huge document is refused, not parsed whole.
    CPU work: run it off the event loop (a thread)."""
    size = len(raw.encode("utf-8") if isinstance(raw, str) else raw)
    if size > MAX_IMPORT_BYTES:
        # (The CLI reads one byte past the limit, not the whole file: "over" is what is known.)
        said = f"over {MAX_IMPORT_BYTES:,} bytes" if size == MAX_IMPORT_BYTES + 1 else f"{size:,} bytes"
        raise ImportTooLarge(f"The history is {said}; an import takes at most {MAX_IMPORT_BYTES:,}.")
    # A UTF-16 file (PowerShell's `>` writes one) is read as the text it is; a byte order mark opens
    # JSON that Notepad or PowerShell saved: it is no part of the JSON.
    if isinstance(raw, bytes) and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            raw = raw.decode("utf-16")
        except UnicodeDecodeError:
            raise InvalidImport("The history is not readable: it opens as UTF-16 but is not; save it as UTF-8.") from None
    raw = raw.removeprefix("\ufeff") if isinstance(raw, str) else raw.removeprefix(b"\xef\xbb\xbf")
    try:
        data = loads_bounded(raw, max_values=MAX_IMPORT_VALUES)
    except JsonTooLarge as exc:
        raise ImportTooLarge(f"The history is too large to import: {exc} (see docs/import.md for the limits).") from None
    except InvalidJson as exc:
        raise InvalidImport(f"The history is {exc}.") from None
    return parse_import(data, title=title)


def history_digest(chat: ChatImport) -> str:
    """What a resume compares: the same messages (roles, texts, times) in the same order."""
    h = hashlib.sha256()
    for m in chat.messages:
        h.update(f"{m.role}\x00{m.time.isoformat()}\x00{len(m.text)}\x00".encode())
        h.update(m.text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def prepare_import(chat: ChatImport, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Every check of :func:`check_messages`, then the history's digest (CPU work, like read_import)."""
    check_messages(chat, max_chars)
    return history_digest(chat)


Progress = Callable[[int, int], Awaitable[None] | None]
