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
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


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


# --------------------------------------------------------------------------- profile
class Profile(BaseModel):
    """Who the user is. Every field is optional: we only store what the user said."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    native_language: str | None = None
    level: str | None = None
    role: str | None = None
    location: str | None = None
    goals: list[str] = Field(default_factory=list)


class Preferences(BaseModel):
    """How the user wants to be answered."""

    model_config = ConfigDict(extra="ignore")

    language: str | None = None
    answer_length: Literal["short", "medium", "long"] | None = None
    code_examples: bool | None = None
    tone: str | None = None
    prefers_bullets: bool | None = None
    other_notes: list[str] = Field(default_factory=list)


class UserDocument(BaseModel):
    """The single store document holding profile and preferences (namespace ``profile``)."""

    profile: Profile = Field(default_factory=Profile)
    preferences: Preferences = Field(default_factory=Preferences)
    updated_at: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- facts
class Fact(BaseModel):
    """One atomic statement about the user, stored as its own indexed store item."""

    id: str
    text: str
    importance: Importance = "medium"
    tags: list[str] = Field(default_factory=list)
    hash: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    last_used: datetime | None = None
    source_thread: str | None = None
    source_message_id: str | None = None
    # Contradictions supersede instead of deleting, so history stays auditable.
    superseded_by: str | None = None
    valid_to: datetime | None = None
    # Stored so the store's equality filter can hide superseded facts from recall.
    status: Literal["active", "superseded"] = "active"
    mentions: int = 1


# --------------------------------------------------------------------------- tasks
class Task(BaseModel):
    id: str
    description: str
    status: TaskStatus = "open"
    due: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    completed_at: datetime | None = None
    source_thread: str | None = None


# --------------------------------------------------------------------------- chats
class ChatRecord(BaseModel):
    """Per-thread record in the ``chats`` namespace: lets a user find a chat by topic."""

    thread_id: str
    title: str = "New chat"
    title_topics: list[str] = Field(default_factory=list)
    summary_text: str = ""
    persona: str | None = None
    message_count: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    last_activity: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- summary
class SummaryBoard(BaseModel):
    """The running summary of one thread, structured so each part can be recalled alone."""

    # Output cap of a fold: the summary budget (600 by default) plus the lists, with room to spare.
    max_output_tokens: ClassVar[int] = 1200

    summary: str = Field("", description="A few sentences: what the conversation has covered so far.")
    key_facts: list[str] = Field(default_factory=list, description="Concrete facts worth keeping (names, numbers, dates, decisions).")
    entities: list[str] = Field(default_factory=list, description="People, places and organizations mentioned.")
    topics: list[str] = Field(default_factory=list, description="Short topic labels.")
    action_items: list[str] = Field(default_factory=list, description="Things someone agreed or asked to do.")
    pending_questions: list[str] = Field(default_factory=list, description="Questions not answered yet.")

    def is_empty(self) -> bool:
        return not (self.summary or self.key_facts or self.entities or self.topics or self.action_items or self.pending_questions)

    def render(self) -> str:
        """Text form for the prompt and for the chat's searchable ``summary_text``."""
        parts: list[str] = []
        if self.summary:
            parts.append(self.summary.strip())
        for label, items in (
            ("Key facts", self.key_facts),
            ("Entities", self.entities),
            ("Topics", self.topics),
            ("Action items", self.action_items),
            ("Pending questions", self.pending_questions),
        ):
            if items:
                parts.append(f"{label}: " + "; ".join(i.strip() for i in items if i.strip()))
        return "\n".join(parts)


# --------------------------------------------------------------------------- extraction
class NewFact(BaseModel):
    text: str = Field(description="One atomic fact about the user, in third person, e.g. 'Lives in Haifa'.")
    importance: Importance = "medium"
    tags: list[str] = Field(default_factory=list)
    supersedes: str | None = Field(None, description="Id of an existing fact this one replaces (a contradiction or an update).")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("fact text is empty")
        return v.strip()


class PreferenceUpdates(BaseModel):
    """Only the preference fields the user expressed this turn; None means unchanged."""

    model_config = ConfigDict(extra="forbid")

    language: str | None = None
    answer_length: Literal["short", "medium", "long"] | None = None
    code_examples: bool | None = None
    tone: str | None = None
    prefers_bullets: bool | None = None
    other_notes: list[str] = Field(default_factory=list)


class ProfileUpdates(BaseModel):
    """Only the profile fields the user stated this turn; None means unchanged."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    native_language: str | None = None
    level: str | None = None
    role: str | None = None
    location: str | None = None
    goals: list[str] = Field(default_factory=list)


class TaskUpdate(BaseModel):
    action: Literal["add", "update", "complete"]
    description: str = Field(description="What the task is (for add), or how to recognise it (for update/complete).")
    task_id: str | None = Field(None, description="Id of an existing task, when known.")
    status: TaskStatus | None = None
    due: str | None = None


class ExtractionResult(BaseModel):
    """The one structured reply of the extraction call."""

    # A turn yields a handful of short facts; a model looping on a field stops here, not at its context.
    max_output_tokens: ClassVar[int] = 768

    new_facts: list[NewFact] = Field(default_factory=list)
    new_preferences: PreferenceUpdates = Field(default_factory=PreferenceUpdates)
    profile_updates: ProfileUpdates = Field(default_factory=ProfileUpdates)
    task_updates: list[TaskUpdate] = Field(default_factory=list)

    def is_empty(self) -> bool:
        return (
            not self.new_facts
            and not self.task_updates
            and self.new_preferences == PreferenceUpdates()
            and self.profile_updates == ProfileUpdates()
        )


class ChatTitle(BaseModel):
    max_output_tokens: ClassVar[int] = 64

    title: str = Field(description="A short title (2-6 words) naming what the chat is about.")
