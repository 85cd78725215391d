"""Pydantic models for every JSON contract the memory agent reads or writes.

The store keeps plain dicts (``model_dump(mode="json")``) so that checkpoints and
store rows stay readable in Studio and psql; these models validate on the way in
and out.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, create_model, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from core.dates import ISO_DATE

from core.text_validation import (
    LIST_ITEMS,
    NAME_CHARS,
    STORED,
    BoundedText,
    Identifier,
    LongText,
    LongValue,
    ShortText,
    ShortValue,
    StorableText,
    TextList,
    ValueList,
    at_most_items,
    is_blank,
    reading_stored,
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def normalize_text(text: str) -> str:
    """Canonical form used for exact-duplicate detection (case, accents of width, spaces, final dot)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\s+", " ", text).strip()
    return text.rstrip(".!? ")


def text_hash(text: str) -> str:
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()[:32]


Importance = Literal["low", "medium", "high"]
IMPORTANCE_WEIGHT: dict[str, float] = {"low": 0.3, "medium": 0.6, "high": 1.0}
TaskStatus = Literal["open", "in_progress", "done"]
IsoDate = Annotated[str, StringConstraints(pattern=ISO_DATE)]
"""A resolved date (core.dates): a day 2026-12-01, a week 2026-W49, a month 2026-12 or a year 2027."""

# Every string and list that comes in is bounded and storable (no NUL, no lone surrogate): core.text_validation.
# Memory values (profile fields, preferences, facts, tasks) are never blank: null is "no value".
TAGS_MAX = 20
Tags = TextList(max_items=TAGS_MAX, item_chars=NAME_CHARS)
Notes = ValueList
SUMMARY_CHARS = 20000
# A summary board's size is governed by max_summary_tokens (an oversized board is recompressed);
# past SUMMARY_CHARS it is cut (SummaryBoard._bounded): a refusal would fail a long chat's every fold.
SummaryItems = list[StorableText]


def set_checked(model: BaseModel, name: str, value: Any) -> None:
    """Set one field of ``model``, ``value`` checked as new input against the field's type (bounded,
    storable, not blank: core.text_validation), whoever calls; pydantic's ValidationError (a ValueError)
    when it fails, before anything is set. The model's other fields are not re-checked."""
    type(model).__pydantic_validator__.validate_assignment(model, name, value)


def checked_value(model_type: type[BaseModel], name: str, value: Any) -> Any:
    """``value`` as :func:`set_checked` would set field ``name`` of a ``model_type`` (ValidationError)."""
    scratch = model_type.model_construct()
    set_checked(scratch, name, value)
    return getattr(scratch, name)


class StoredModel(BaseModel):
    """A document of the store. ``model_validate`` (how the store's dicts are read back) reads it as
    stored: length limits were checked when it was written, and one lowered or added since
    (or a list grown by merges) must not make a user's memory unreadable. Building one from
    new values (the constructor) checks them all."""

    @classmethod
    def model_validate(cls, obj: Any, *, context: Any | None = None, **kwargs: Any):
        return super().model_validate(obj, context=STORED if context is None else context, **kwargs)


# --------------------------------------------------------------------------- provenance
MAX_SOURCES = 20
"""Sources kept per item: the first and the newest (a fact heard a hundred times keeps 20)."""


class Source(BaseModel):
    """Where a memory came from: the message that said it, and what wrote it down."""

    model_config = ConfigDict(extra="ignore")

    thread_id: Identifier | None = None
    message_id: Identifier | None = None
    said_at: datetime | None = None
    by: ShortText = "model"
    """"rules" (the extraction rules), "model <name>", "user" (typed in /memory or the API),
    "client" (the LangGraph store API), "remember" (MCP's remember tool)."""


Sources = Annotated[list[Source], AfterValidator(at_most_items(MAX_SOURCES))]
"""An item's sources as written: at most MAX_SOURCES, whoever writes them (with_source keeps its own)."""


def with_source(sources: list[Source], new: Source | None) -> list[Source]:
    """``sources`` plus ``new`` (once per message), the first and the newest kept."""
    if new is None or any(s.message_id == new.message_id and s.thread_id == new.thread_id and new.message_id for s in sources):
        return sources
    out = [*sources, new]
    return out if len(out) <= MAX_SOURCES else [out[0], *out[-(MAX_SOURCES - 1):]]


# --------------------------------------------------------------------------- profile
class Profile(BaseModel):
    """Who the user is. Every field is optional: we only store what the user said."""

    model_config = ConfigDict(extra="ignore")

    name: ShortValue | None = None
    native_language: ShortValue | None = None
    level: ShortValue | None = None
    role: ShortValue | None = None
    location: ShortValue | None = None
    goals: Notes = Field(default_factory=list)


class Preferences(BaseModel):
    """How the user wants to be answered."""

    model_config = ConfigDict(extra="ignore")

    language: ShortValue | None = None
    answer_length: Literal["short", "medium", "long"] | None = None
    code_examples: bool | None = None
    tone: ShortValue | None = None
    prefers_bullets: bool | None = None
    other_notes: Notes = Field(default_factory=list)


_SOURCE_KEYS = frozenset([*(f"profile.{f}" for f in Profile.model_fields), *(f"preferences.{f}" for f in Preferences.model_fields)])


class UserDocument(StoredModel):
    """The single store document holding profile and preferences (namespace ``profile``)."""

    profile: Profile = Field(default_factory=Profile)
    preferences: Preferences = Field(default_factory=Preferences)
    updated_at: datetime = Field(default_factory=utcnow)
    sources: dict[str, Sources] = Field(default_factory=dict)
    """Where each field's value came from, keyed "profile.role", "preferences.answer_length"."""

    @field_validator("sources")
    @classmethod
    def _sources_of_fields(cls, sources: dict[str, list[Source]], info: ValidationInfo) -> dict[str, list[Source]]:
        # Keyed by the document's own fields only, so a client's write cannot grow it without bound.
        unknown = [k for k in sources if k not in _SOURCE_KEYS]
        if unknown and not reading_stored(info):
            raise ValueError(f"sources are keyed by a field ('profile.role', 'preferences.tone'), not {unknown[0][:60]!r}")
        return sources


# --------------------------------------------------------------------------- facts
class Fact(StoredModel):
    """One atomic statement about the user, stored as its own indexed store item."""

    id: Identifier
    text: LongValue
    importance: Importance = "medium"
    tags: Tags = Field(default_factory=list)
    hash: ShortText = ""
    slot: ShortText | None = None
    """The single-valued slot the fact fills ("lives in", "works as"), so a new value finds the old by index."""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    last_used: datetime | None = None
    source_thread: Identifier | None = None
    source_message_id: Identifier | None = None
    sources: Sources = Field(default_factory=list)
    """Every message that said it (merges and repeats add theirs), and what wrote it down."""
    # Contradictions supersede instead of deleting, so history stays auditable.
    superseded_by: Identifier | None = None
    valid_to: datetime | None = None
    # Stored so the store's equality filter can hide superseded facts from recall.
    status: Literal["active", "superseded"] = "active"
    mentions: int = 1

    def supersede(self, now: datetime, by: str | None = None) -> None:
        """No longer active from ``now`` on, kept for history; ``by``: the fact that replaces it."""
        self.status, self.valid_to, self.updated_at = "superseded", now, now
        if by is not None:
            self.superseded_by = by


# --------------------------------------------------------------------------- tasks
class Task(StoredModel):
    id: Identifier
    description: LongValue
    # "retracted": taught only by a message the user edited away or regenerated; kept, never shown.
    status: Literal["open", "in_progress", "done", "retracted"] = "open"
    due: ShortValue | None = None
    """The user's own words ("next Tuesday")."""
    due_date: IsoDate | None = None
    """The date those words meant when they were said (core.dates.resolve_date), so they stay true."""
    hash: ShortText = ""
    """text_hash of the description, for exact-duplicate lookups by index."""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    completed_at: datetime | None = None
    source_thread: Identifier | None = None
    source_message_id: Identifier | None = None
    sources: Sources = Field(default_factory=list)


# --------------------------------------------------------------------------- chats
NEW_CHAT_TITLE = "New chat"
"""A chat's title until its first exchange titles it (record_chat)."""


class ChatRecord(StoredModel):
    """Per-thread record in the ``chats`` namespace: lets a user find a chat by topic."""

    thread_id: Identifier
    title: ShortText = NEW_CHAT_TITLE
    title_topics: TextList() = Field(default_factory=list)
    title_by_user: bool = False  # a title the user set is never replaced by a generated one
    summary_text: BoundedText(SUMMARY_CHARS) = ""
    persona: ShortText | None = None
    message_count: int = 0
    # How many of the user's messages state something rather than only ask (core.statements): a
    # chat of questions alone is no evidence and is not offered as a related chat. None: not counted yet.
    user_statements: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    last_activity: datetime = Field(default_factory=utcnow)
    # What the chat's stored vector was made from (memory.writer.records.vector_still_serves):
    # digests of the text's parts (its head, each newest line as included; none when unknown) and
    # the chat's message count then.
    vector_parts: list[str] = Field(default_factory=list)
    vector_messages: int = 0


# --------------------------------------------------------------------------- what was said
class SaidMessage(BaseModel):
    """A message as the index of what was said keeps it (storage.episodes): derived from the
    checkpoints, so it is rebuilt, never written by a client."""

    thread_id: Identifier
    message_id: str
    position: int
    role: Literal["user", "assistant"]
    sent_at: datetime
    text: str


# --------------------------------------------------------------------------- summary
class SummaryBoard(BaseModel):
    """The running summary of one thread, structured so each part can be recalled alone."""

    # Output cap of a fold: the summary budget (600 by default) plus the lists, with room to spare.
    max_output_tokens: ClassVar[int] = 1200

    summary: StorableText = Field("", description="A few sentences: what the conversation has covered so far.")
    key_facts: SummaryItems = Field(default_factory=list, description="Concrete facts worth keeping (names, numbers, dates, decisions).")
    entities: SummaryItems = Field(default_factory=list, description="People, places and organizations mentioned.")
    topics: SummaryItems = Field(default_factory=list, description="Short topic labels.")
    action_items: SummaryItems = Field(default_factory=list, description="Things someone agreed or asked to do.")
    pending_questions: SummaryItems = Field(default_factory=list, description="Questions not answered yet.")

    @model_validator(mode="after")
    def _bounded(self) -> "SummaryBoard":
        """A board that renders past SUMMARY_CHARS is cut down to it, where it is made: a server that
        ignored the output cap (and a failed recompression) stored a 250,000-character board in every
        later checkpoint. The prose keeps at most half, cut at a word; then whole items, each list's first ones first.
        Cut, not refused: the fold's messages stay in the thread, and a refusal would fail every fold."""
        if len(self.render()) <= SUMMARY_CHARS:
            return self
        prose = self.summary.strip()
        if len(prose) > SUMMARY_CHARS // 2:
            head = prose[: SUMMARY_CHARS // 2 - 1]
            prose = (head[: head.rfind(" ")] if " " in head[1:] else head).rstrip() + "…"
        room = SUMMARY_CHARS - len(prose)
        lists: dict[str, list[str]] = {name: [] for name, _ in self._LABELS}
        for rank in range(max(len(getattr(self, name)) for name in lists)):  # the lists' first items first
            for name, label in self._LABELS:
                items = getattr(self, name)
                if rank < len(items) and items[rank].strip():
                    cost = len(items[rank].strip()) + (2 if lists[name] else len(label) + 3)  # "; " or "\nLabel: "
                    if cost <= room:
                        lists[name].append(items[rank])
                        room -= cost
        self.__dict__.update(summary=prose, **lists)  # the validated values, cut: nothing to check again
        return self

    _LABELS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("key_facts", "Key facts"),
        ("entities", "Entities"),
        ("topics", "Topics"),
        ("action_items", "Action items"),
        ("pending_questions", "Pending questions"),
    )

    def is_empty(self) -> bool:
        return not (self.summary or self.key_facts or self.entities or self.topics or self.action_items or self.pending_questions)

    def render(self) -> str:
        """Text form for the prompt and for the chat's searchable ``summary_text``."""
        parts: list[str] = []
        if self.summary:
            parts.append(self.summary.strip())
        for name, label in self._LABELS:
            if items := getattr(self, name):
                parts.append(f"{label}: " + "; ".join(i.strip() for i in items if i.strip()))
        return "\n".join(parts)


# --------------------------------------------------------------------------- extraction
class NewFact(BaseModel):
    text: LongText = Field(description="One atomic fact about the user, in third person, e.g. 'Lives in Haifa'.")
    importance: Importance = "medium"
    tags: Tags = Field(default_factory=list)
    supersedes: Identifier | None = Field(None, description="Id of an existing fact this one replaces (a contradiction or an update).")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if is_blank(v):
            raise ValueError("fact text is empty")
        return v.strip()


# What a model writes into a field it has nothing for (the 1.5B filled every profile field, "location":
# "unknown" among them): no statement, so the field stays unchanged.
NOT_STATED = frozenset({"", "-", "?", "n/a", "na", "none", "null", "nil", "unknown", "unspecified", "not specified",
                        "not stated", "not provided", "not mentioned", "not given", "not available", "tbd"})  # fmt: skip


def is_not_stated(value: str, field: str) -> bool:
    """A placeholder such as "unknown", the field's own name ("location": "location"), or a blank
    value (core.text_validation.is_blank: nothing but spaces or invisible characters)."""
    if is_blank(value):
        return True
    said = " ".join(value.strip().strip(".!").casefold().replace("_", " ").split())
    return said in NOT_STATED or said == field.replace("_", " ")


class _StatedOnly(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _drop_placeholders(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kept: dict[str, Any] = {}
        for field, value in data.items():
            if isinstance(value, str) and is_not_stated(value, field):
                continue
            if isinstance(value, list):
                value = [v for v in value if not (isinstance(v, str) and is_not_stated(v, field))]
            kept[field] = value
        return kept


class PreferenceUpdates(_StatedOnly, Preferences):
    """Only the preference fields the user expressed this turn; None means unchanged."""

    model_config = ConfigDict(extra="forbid")


class ProfileUpdates(_StatedOnly, Profile):
    """Only the profile fields the user stated this turn; None means unchanged."""

    model_config = ConfigDict(extra="forbid")


def patch_model(model: type[BaseModel], doc: str) -> type[BaseModel]:
    """``model``'s fields, each optional and None when not sent, for a PATCH body (one field set, no copy).

    ``model_fields_set`` of a parsed patch says which fields were sent; a sent null clears the field.
    """
    def optional(info):  # keep the field's constraints (lengths) on the value itself
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        return kind | None

    fields = {name: (optional(info), Field(None, description=info.description)) for name, info in model.model_fields.items()}
    patch = create_model(f"{model.__name__}Patch", __config__=ConfigDict(extra="forbid"), __doc__=doc, **fields)
    patch.__module__ = __name__
    return patch


ProfilePatch = patch_model(Profile, "Only the profile fields sent change; null clears a field.")
PreferencesPatch = patch_model(Preferences, "Only the preference fields sent change; null clears a field.")


class TaskUpdate(BaseModel):
    action: Literal["add", "update", "complete"]
    description: LongText = Field(description="What the task is (for add), or how to recognise it (for update/complete).")
    task_id: Identifier | None = Field(None, description="Id of an existing task, when known.")
    status: TaskStatus | None = None
    due: ShortValue | None = None
    # Resolved from ``due`` against the message's time by code (memory.extractor), never asked of a model.
    due_date: SkipJsonSchema[IsoDate | None] = Field(None, exclude_if=lambda v: v is None)

    @field_validator("due", mode="before")
    @classmethod
    def _due_stated_or_none(cls, v: Any) -> Any:
        # A model writes "" or "unknown" for a task without a due date: none, never a blank due.
        return None if isinstance(v, str) and is_not_stated(v, "due") else v

    @model_validator(mode="after")
    def _new_task_described(self) -> "TaskUpdate":
        # An update or completion may name its task by id alone; a new task must say what it is.
        if self.action == "add" and is_blank(self.description):
            raise ValueError("a new task's description is empty")
        return self


RetractableField = Literal["name", "native_language", "level", "role", "location"]
"""The profile's single-valued fields: the ones a user can say no longer hold."""


class ExtractionResult(BaseModel):
    """The one structured reply of the extraction call."""

    # A turn yields a handful of short facts; a model looping on a field stops here, not at its context.
    max_output_tokens: ClassVar[int] = 768

    new_facts: Annotated[list[NewFact], AfterValidator(at_most_items(LIST_ITEMS))] = Field(default_factory=list)
    new_preferences: PreferenceUpdates = Field(default_factory=PreferenceUpdates)
    profile_updates: ProfileUpdates = Field(default_factory=ProfileUpdates)
    task_updates: Annotated[list[TaskUpdate], AfterValidator(at_most_items(LIST_ITEMS))] = Field(default_factory=list)
    # A profile field the user says no longer holds, with the value they named ("I no longer live in
    # Rome": {"location": "Rome"}). Found by the rules (memory.extractor), never asked of a model; the
    # writer clears the field only while it still holds that value.
    retracted: SkipJsonSchema[dict[RetractableField, ShortValue]] = Field(default_factory=dict, exclude_if=lambda v: not v)

    def is_empty(self) -> bool:
        return (
            not self.new_facts
            and not self.retracted
            and not self.task_updates
            and self.new_preferences == PreferenceUpdates()
            and self.profile_updates == ProfileUpdates()
        )


class ChatTitle(BaseModel):
    max_output_tokens: ClassVar[int] = 64

    title: ShortText = Field(description="A short title (2-6 words) naming what the chat is about.")
