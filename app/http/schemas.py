"""Request and response bodies of the chat API (they make up its OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.schemas import Fact, SummaryBoard, Tags, TaskStatus
from core.text_validation import Identifier, LongValue, ShortText, ShortValue
from memory.queries import InvalidItemOut, TaskList  # noqa: F401 - the read layer's models are the API's

MAX_FIRST_MESSAGES = 10


# --------------------------------------------------------------------------- errors
class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. reply_in_progress.")
    message: str = Field(description="What happened and what to do, for people.")


class ErrorResponse(BaseModel):
    error: ErrorDetail


# --------------------------------------------------------------------------- chats
class ChatCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: ShortText | None = Field(
        None, description="A title chosen by the user: kept, never replaced by a generated one. Omitted: the agent titles the chat."
    )
    persona: ShortText = Field("assistant", description="A persona from GET /personas.")
    messages: list[str] = Field(
        default_factory=list,
        max_length=MAX_FIRST_MESSAGES,
        description="First user messages. Each one is a full turn: answered by the agent, summarized and "
        "mined for memories, in order, before the response returns (not streamed). A turn that asks "
        "for a confirmation, or fails, stops the sequence: the rest are not sent, and the returned "
        "history shows how far it got.",
    )


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The user's message (at most Context.max_message_chars characters).")


class ResumeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approved: bool = Field(description="The answer to the pending confirmation.")
    interrupt_id: Identifier | None = Field(None, description="Which pending confirmation; all of them when omitted.")


class ChatPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: ShortText | None = Field(
        description="The chat's new title, kept from now on (no generated title replaces it). "
        "null hands titling back to the agent: the current title stays until the next generated one.",
    )


class ImportProgress(BaseModel):
    """A chat whose import has not completed (docs/import.md)."""

    state: str = Field(description="running | incomplete (stopped, failed or its worker died: resume or delete it) | cancelling")
    imported: int = Field(description="Messages imported so far.")
    total: int = Field(description="Messages in the history.")
    detail: str | None = Field(None, description="Why an incomplete import stopped.")


class ChatSummary(BaseModel):
    id: str
    title: str
    title_set_by_user: bool = Field(False, description="The user chose this title; generated titles never replace it.")
    persona: str
    summary_snippet: str = Field(description="The start of the chat's searchable summary.")
    message_count: int
    created_at: datetime
    last_activity: datetime
    import_state: ImportProgress | None = Field(None, description="Set while the chat is being imported, or when its import is incomplete.")


class ChatList(BaseModel):
    chats: list[ChatSummary]
    total: int = Field(0, description="How many chats the user has (a page with ?limit= shows some of them).")


class ToolCallOut(BaseModel):
    id: str | None
    name: str
    args: dict[str, Any]


class MessageOut(BaseModel):
    id: str
    role: Literal["user", "assistant", "tool", "system"]
    content: str
    tool_calls: list[ToolCallOut] = Field(default_factory=list)
    tool_name: str | None = None
    in_model_view: bool = Field(description="False once the message is folded into the summary.")
    sent_at: datetime | None = Field(None, description="When the message was said (UTC); None for messages from before times were kept.")
    stopped: bool = Field(
        False, description="A reply the user stopped: kept as far as it got; memory learned nothing from its turn."
    )
    forgotten: bool = Field(
        False, description="The message carries something the user had the agent forget: shown here as written, never to a model."
    )


class ModelView(BaseModel):
    """What the model is shown of this chat: the summary plus the messages after its cursor."""

    summary: str
    summarized_through: str | None
    summary_folds: int
    message_ids: list[str]


class PendingInterrupt(BaseModel):
    id: str
    value: Any


class ChatDetail(BaseModel):
    chat: ChatSummary
    messages: list[MessageOut] = Field(description="The messages, oldest first: all of them, or the page ?limit= and ?before= ask for.")
    messages_total: int = Field(0, description="How many messages the chat has.")
    has_earlier: bool = Field(False, description="Messages older than the first shown exist (ask with ?before=<its id>).")
    summary: SummaryBoard
    model_view: ModelView
    pending_interrupts: list[PendingInterrupt]
    running: bool = Field(description="A reply is being generated right now.")


class ImportedChatOut(BaseModel):
    chat: ChatSummary
    imported_messages: int = Field(description="Messages added by this import (0 when it was imported before and has not grown).")
    already_imported: bool = Field(description="The user had imported this conversation before (its source id) and nothing was added.")
    grown: bool = Field(False, description="The user had imported this conversation before and it has grown since: its new messages were added to the end of that chat.")
    not_added: Literal["chat_changed", "message_differs", "chat_busy", "import_in_progress", "import_incomplete"] | None = Field(
        None,
        description="Imported before, and the export holds messages the chat lacks, but they were not added: chat_changed (a message "
        "deleted or added here since) or message_differs (a message edited here, or where it came from): delete the chat and import "
        "again to take them; chat_busy (a reply was running on the chat): import again when it has ended; import_in_progress "
        "(another import is adding the conversation's new messages, or importing it from another export, now); import_incomplete (the chat's import of another export "
        "of it stopped part way: finish that one first, with ?resume=<chat id> and its history, then import again).",
    )
    not_added_reason: str | None = Field(None, description="Why the new messages were not added, in a sentence for the user.")
    skipped_copies: int = Field(
        0, description="Identical copies of this conversation (the same id, title, times and messages) the export also held: not imported, as they add nothing."
    )
    split_messages: int = Field(
        0, description="Its messages over the message limit (`max_message_chars`), each imported as consecutive messages in parts that join back into it."
    )


class ImportedChats(BaseModel):
    """What an import of a ChatGPT or Claude export made: one chat per conversation, oldest first."""

    chats: list[ImportedChatOut]


class SearchHit(BaseModel):
    chat: ChatSummary
    similarity: float
    recency: float
    score: float


class ChatSearchResult(BaseModel):
    query: str
    outcome: Literal["one", "several", "none"] = Field(
        description="one: a clear match (in `match`); several: ask the user which of `candidates`; none: nothing related."
    )
    match: SearchHit | None
    candidates: list[SearchHit]
    formula: str


class StopResult(BaseModel):
    stopped: bool
    status: str = Field(description="stopped, finished (too late to stop), idle (nothing was running), or the run's status.")
    run_id: str | None = None
    message: str


class Deleted(BaseModel):
    deleted: dict[str, int]


# --------------------------------------------------------------------------- memory
def _no_nulls(patch: BaseModel, fields: tuple[str, ...], forget_with: str) -> BaseModel:
    """A field sent as null that cannot be cleared is refused (422), not taken for one left out."""
    sent_null = [f for f in fields if f in patch.model_fields_set and getattr(patch, f) is None]
    if sent_null:
        raise ValueError(f"{sent_null[0]} cannot be null: send a new value, or {forget_with} to forget it")
    return patch


class FactPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: LongValue | None = None
    importance: Literal["low", "medium", "high"] | None = None
    tags: Tags | None = None

    @model_validator(mode="after")
    def _clearable(self) -> "FactPatch":
        return _no_nulls(self, ("text", "importance", "tags"), "DELETE the fact")


class TaskPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: LongValue | None = None
    status: TaskStatus | None = None
    due: ShortValue | None = Field(None, description="The due date in the user's words; null clears it (a blank one is refused).")

    @model_validator(mode="after")
    def _clearable(self) -> "TaskPatch":
        return _no_nulls(self, ("description", "status"), "DELETE the task")


class FactList(BaseModel):
    facts: list[Fact]
    invalid: list[InvalidItemOut] = Field(default_factory=list, description="Stored facts that do not validate (ignored by the agent).")


class InvalidItemList(BaseModel):
    invalid: list[InvalidItemOut]


# --------------------------------------------------------------------------- misc
class PersonaOut(BaseModel):
    name: str
    title: str
    description: str


class PersonaList(BaseModel):
    personas: list[PersonaOut]


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str = Field(description="ok, or what is wrong with it in words (the exception itself is only logged).")
    worker_pid: int


class Me(BaseModel):
    user_id: str
    auth: Literal["on", "off"]

