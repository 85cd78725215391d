"""Read-only queries over one user's memory: the one read layer of the entry points (HTTP,
CLI, MCP) and the agent's own tools (``nodes/tools.py``); they import nothing else of memory/
to read. The readers that live beside their writers (memory.user_memory's plain readers, which
parse every item through its kind's model; finding "the chat about …"; which chats are the user's
and which are being imported; where a memory came from; what the user had forgotten) are
re-exported here, so an entry point names this module for every read (tests/unit/test_one_home.py
checks it); the views built on them (searches, summaries, task lists) live here.

Each function but :func:`installation_counts` (``memory-agent doctor``'s totals) is scoped to one ``user_id``: it reads only that user's store
namespaces, and only the threads the server recorded as that user's
(``storage.thread_owners``; a record in the user's ``chats`` namespace alone proves
nothing). A chat id that is not one of the user's chats is "not found", never read,
so knowing another user's thread id gives nothing away.

Where things come from:
- chat records (title, dates, searchable summary text): the store, ``chats`` namespace;
- a chat's full history and its running summary board: the latest checkpoint of the
  thread (``messages``, ``summary``, ``summarized_through``, ``summary_folds``);
- facts and tasks: the store, ``facts`` and ``tasks`` namespaces.

Messages are searched in the episodic index (``memory.episodes``: every message of every chat,
with its time), so a ``time_range`` filters messages by when they were said; chat summaries by
the chats that were active in the window (created before its end, last active after its start).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Sequence

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore
from pydantic import BaseModel, Field

from memory import chat_search, episodes
from core.words import keyword_match, query_terms
from memory.chat_admin import import_states, owned_chats, owned_ids, user_thread_ids  # noqa: F401 - re-exported
from memory.chat_search import FORMULA as CHAT_SEARCH_FORMULA, ChatLookup, RankedChat, chat_query, find_chat, switch_request  # noqa: F401 - re-exported
from memory.forgetting import forgotten_in, redactor_for, shown_state  # noqa: F401 - re-exported
from memory.provenance import SourceView, as_json as sources_as_json, memory_sources  # noqa: F401 - re-exported
from storage import embeddings_record, store_rows
from core.errors import MemoryAgentError
from core.namespaces import chats_ns
from core.schemas import ChatRecord, Fact, Importance, SummaryBoard, Task, TaskStatus, normalize_text, utcnow
from core.text_validation import shortened
from storage.memory_store import memory_store
from memory.time_ranges import TIME_RANGE_HELP, InvalidTimeRange, TimeWindow, parse_time_range  # noqa: F401 - re-exported for MCP and tests
from memory.user_memory import (  # noqa: F401 - the plain readers, re-exported for the entry points
    InvalidItem,
    ItemIsValid,
    Kind,
    check_item,
    get_chat,
    get_task,
    get_user_document,
    invalid_items,
    list_chats,
    list_facts,
    nearest_items,
    search_chat_summaries,
    search_facts,
    search_tasks,
    stored_tasks,
)

Role = Literal["user", "assistant"]
ContextType = Literal["action_items", "pending_questions", "facts", "entities", "tasks"]
CONTEXT_TYPES: tuple[str, ...] = ("action_items", "pending_questions", "facts", "entities", "tasks")

# The same similarity floor as finding a chat by topic (memory.chat_search).
MIN_SUMMARY_SIMILARITY = chat_search.MIN_SIMILARITY
# Reading threads concurrently, but leaving most of the pool to other work.
THREAD_READ_CONCURRENCY = 4
# recall_context over all chats reads at most this many (newest) threads.
RECALL_CHAT_LIMIT = 100
SNIPPET_CHARS = 240
RECENT_MESSAGES = 6
MAX_LIMIT = 50


class ChatNotFound(MemoryAgentError, LookupError):
    """The chat id is not one of this user's chats (or the user has no chats yet)."""


# --------------------------------------------------------------------------- results
class MessageView(BaseModel):
    index: int = Field(description="Position of the message in the chat's full history (0 = first).")
    role: Role
    text: str


class SummaryHit(BaseModel):
    """A chat whose summary is semantically close to the query."""

    chat_id: str
    title: str
    summary_snippet: str
    similarity: float = Field(description="Cosine similarity of the query and the chat's summary (0..1).")
    last_activity: datetime


class MessageHit(BaseModel):
    """A message of the user's chats that holds words of the query or is close to it in meaning."""

    chat_id: str
    chat_title: str
    message_index: int
    role: Role
    sent_at: datetime = Field(description="When the message was said (UTC).")
    snippet: str = Field(description="The message text around the first match (whole message when short).")
    matched_terms: list[str]
    score: float = Field(
        description="Share of the query's terms found (plus 0.25 when the whole query appears); hits come best first "
        "by full-text and vector rank fused, so a message found by meaning alone scores 0 here."
    )
    chat_last_activity: datetime


class ConversationSearch(BaseModel):
    query: str
    time_range: str = Field(description="The window applied, as understood ('all' when none).")
    chats_searched: int = Field(description="Chats active in the time range (their messages are searched by their own times).")
    summaries: list[SummaryHit]
    messages: list[MessageHit]


class ConversationSummary(BaseModel):
    chat_id: str
    title: str
    persona: str | None
    created_at: datetime
    last_activity: datetime
    message_count: int
    summary: SummaryBoard = Field(description="The running summary board (empty until the chat was first folded).")
    summary_text: str = Field(description="The board rendered as text.")
    summary_folds: int
    summarized_messages: int = Field(description="How many of the oldest messages the summary covers.")
    recent_messages: list[MessageView] = Field(description="The newest messages (at most 6) the summary does not cover yet.")


class RecalledItem(BaseModel):
    text: str
    source: Literal["chat_summary", "long_term_memory"] = Field(
        description="chat_summary: from a chat's running summary board; long_term_memory: a stored fact or task."
    )
    chat_id: str | None = None
    chat_title: str | None = None
    id: str | None = Field(None, description="Id of the stored fact or task.")
    status: TaskStatus | None = Field(None, description="Task status (open, in_progress, done).")
    due: str | None = Field(None, description="The due date in the user's words (\"next Tuesday\").")
    due_date: str | None = Field(None, description="The date those words meant when said (ISO: 2026-12-01, 2026-W49, 2026-12).")
    importance: Importance | None = None
    updated_at: datetime | None = None


class RecalledContext(BaseModel):
    context_type: ContextType
    chat_id: str | None = Field(description="The chat recalled from; None when all of the user's chats were.")
    chats_considered: int
    items: list[RecalledItem]


class ChatMatch(BaseModel):
    chat_id: str
    title: str
    summary_snippet: str
    similarity: float
    words: float = Field(0.0, description="Share of the query's content words the chat contains.")
    recency: float = Field(description=f"0.5^(days since the last activity / {chat_search.RECENCY_HALF_LIFE_DAYS:g}).")
    score: float = Field(
        description=f"{chat_search.W_SIMILARITY} · similarity + {chat_search.W_WORDS} · words + {chat_search.W_RECENCY} · recency."
    )
    message_count: int
    created_at: datetime
    last_activity: datetime


class ChatSearch(BaseModel):
    query: str
    chats: list[ChatMatch]


class InvalidItemOut(BaseModel):
    """A stored item that does not match its schema (written around the agent, e.g. through the
    LangGraph store API). The agent ignores it; delete it, or the next write replaces it (profile)."""

    kind: Kind
    key: str = Field(description="The item's key in its namespace (a fact's or task's id, a chat's thread id).")
    error: str = Field(description="Why it does not validate.")
    value: Any = Field(description="The stored value, as it is.")
    updated_at: datetime | None = None

    @classmethod
    def of(cls, items: list[InvalidItem]) -> list["InvalidItemOut"]:
        return [cls(kind=i.kind, key=i.key, error=i.error, value=i.value, updated_at=i.updated_at) for i in items]


class TaskList(BaseModel):
    status: TaskStatus | None = Field(None, description="The status filter applied; None lists every task.")
    count: int
    tasks: list[Task]
    invalid: list[InvalidItemOut] = Field(default_factory=list, description="Stored tasks that do not validate (ignored by the agent).")


# --------------------------------------------------------------------------- threads
@dataclass
class ThreadSnapshot:
    """What the latest checkpoint of a chat holds (empty when it has none)."""

    messages: list[BaseMessage] = field(default_factory=list)
    board: SummaryBoard = field(default_factory=SummaryBoard)
    summarized_through: str | None = None
    summary_folds: int = 0

    def summarized_count(self) -> int:
        if self.summarized_through is None:
            return 0
        for i, m in enumerate(self.messages):
            if m.id == self.summarized_through:
                return i + 1
        return 0  # the cursor message is gone: nothing counts as covered


async def _read_thread(checkpointer: BaseCheckpointSaver, thread_id: str) -> ThreadSnapshot:
    # Private on purpose: callers pass only thread ids taken from the user's chat records.
    tup = await checkpointer.aget_tuple({"configurable": {"thread_id": thread_id}})
    if tup is None:
        return ThreadSnapshot()
    values: dict[str, Any] = tup.checkpoint.get("channel_values", {}) or {}
    summary = values.get("summary") or {}
    return ThreadSnapshot(
        messages=list(values.get("messages") or []),
        board=SummaryBoard.model_validate(summary) if summary else SummaryBoard(),
        summarized_through=values.get("summarized_through"),
        summary_folds=int(values.get("summary_folds") or 0),
    )


@dataclass
class CurrentThread:
    """The thread a run is in, as its state holds it now (newer than its last checkpoint)."""

    thread_id: str
    snapshot: ThreadSnapshot

    def record(self, stored: ChatRecord | None) -> ChatRecord:
        # A chat's record is written after its first reply: before that the thread is still the user's.
        return stored or ChatRecord(thread_id=self.thread_id, title="This chat", message_count=len(self.snapshot.messages))


async def _read_threads(
    checkpointer: BaseCheckpointSaver | None, chats: Sequence[ChatRecord], current: CurrentThread | None = None
) -> list[ThreadSnapshot]:
    gate = asyncio.Semaphore(THREAD_READ_CONCURRENCY)

    async def one(chat: ChatRecord) -> ThreadSnapshot:
        if current is not None and chat.thread_id == current.thread_id:
            return current.snapshot
        if checkpointer is None:  # a graph run without a saver: only the current thread is known
            return ThreadSnapshot()
        async with gate:
            return await _read_thread(checkpointer, chat.thread_id)

    return list(await asyncio.gather(*(one(c) for c in chats)))


async def _user_chat(store: BaseStore, user_id: str, chat_id: str | None, current: CurrentThread | None = None) -> ChatRecord:
    """The user's chat with this id, or the latest one (the current one in a run) when None."""
    chat_id = _chat_id(chat_id) or (current.thread_id if current else None)
    if current is not None and chat_id == current.thread_id:
        return current.record(await get_chat(store, user_id, chat_id))
    if chat_id is None:
        chats = await _own_chats(store, user_id)
        if not chats:
            raise ChatNotFound("This user has no chats yet.")
        return chats[0]
    if not await owned_ids(store, user_id, [chat_id]):
        raise ChatNotFound(f"No chat '{chat_id}' among this user's chats.")
    # Owned but not yet summarized (started elsewhere): its record comes after the first reply.
    return await get_chat(store, user_id, chat_id) or ChatRecord(thread_id=chat_id)


async def _own_chats(store: BaseStore, user_id: str) -> list[ChatRecord]:
    """The user's chat records, newest first, of the threads they own."""
    return await owned_chats(store, user_id, await list_chats(store, user_id))


def _chat_id(chat_id: str | None) -> str | None:
    """Clients often send "" for an optional argument: it means none."""
    return (chat_id or "").strip() or None


def _role(message: BaseMessage) -> Role | None:
    return episodes.role_of(message)  # type: ignore[return-value]


def _conversation(messages: Sequence[BaseMessage], start: int = 0) -> list[tuple[int, Role, str]]:
    """(position in the full history, role, text) of the user and assistant messages from ``start`` on."""
    out = []
    for i, m in enumerate(messages[start:], start):
        role, text = _role(m), m.text.strip()
        if role and text:
            out.append((i, role, text))
    return out


def _clip(text: str, limit: int = SNIPPET_CHARS) -> str:
    return shortened(" ".join(text.split()), limit)


def _clamp(limit: int) -> int:
    return max(1, min(int(limit), MAX_LIMIT))


def _snippet_around(text: str, position: int, width: int = SNIPPET_CHARS) -> str:
    if len(text) <= width:
        return _clip(text, width)
    start = max(0, min(position - width // 3, len(text) - width))
    piece = text[start : start + width]
    return ("…" if start > 0 else "") + " ".join(piece.split()) + ("…" if start + width < len(text) else "")


# --------------------------------------------------------------------------- queries
async def search_conversation_history(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver | None,
    user_id: str,
    query: str,
    time_range: str | None = None,
    limit: int = 10,
    current: CurrentThread | None = None,
) -> ConversationSearch:
    """Chats whose summaries are semantically close to ``query``, and messages of every chat of the
    user holding its words or close to it in meaning (the episodic index), each with its time.

    ``limit`` caps each list; the cost does not grow with the number of chats (an indexed search).
    """
    limit = _clamp(limit)
    window = parse_time_range(time_range)
    chats_all = await _own_chats(store, user_id)
    if current is not None and all(c.thread_id != current.thread_id for c in chats_all):
        chats_all.insert(0, current.record(None))
    in_range = [c for c in chats_all if window.admits(c)]  # newest first
    admitted = {c.thread_id: c for c in in_range}
    chats = in_range
    if not query.strip():
        return ConversationSearch(query=query, time_range=window.label, chats_searched=0, summaries=[], messages=[])

    # The window is applied after the vector search: look further down the ranking when it is narrow.
    fetch = max(20, limit * 3) if window.label == "all" else max(100, limit * 3)
    summaries: list[SummaryHit] = []
    for hit in await nearest_items(store, chats_ns(user_id), query, limit=fetch):
        chat = admitted.get(hit.key)
        if chat is None or hit.score is None or hit.score < MIN_SUMMARY_SIMILARITY:
            continue
        summaries.append(
            SummaryHit(
                chat_id=chat.thread_id,
                title=chat.title,
                summary_snippet=_clip(chat.summary_text, 400),
                similarity=round(float(hit.score), 3),
                last_activity=chat.last_activity,
            )
        )

    messages = await _indexed_message_hits(store, user_id, query, window, {c.thread_id: c for c in chats_all}, limit)
    return ConversationSearch(
        query=query,
        time_range=window.label,
        chats_searched=len(chats),
        summaries=summaries[:limit],
        messages=messages,
    )


async def _indexed_message_hits(
    store: BaseStore, user_id: str, query: str, window: TimeWindow, chats: dict[str, ChatRecord], limit: int
) -> list[MessageHit]:
    """Messages of every chat of the user, from the episodic index (memory.episodes), the time
    range applied to each message's own time; best first (full text and vectors fused)."""
    ours = memory_store(store)
    found = await episodes.fused_search(
        ours.pool, ours.embeddings, user_id, query, since=window.start, until=window.end,
        candidates=max(episodes.CANDIDATES, limit), gate=episodes.SEARCH_GATE,
    )
    terms, phrase = query_terms(query), " ".join(query.casefold().split())
    hits = []
    for c in (f.candidate for f in found[:limit]):
        chat = chats.get(c.thread_id) or ChatRecord(thread_id=c.thread_id, title="This chat")
        matched = keyword_match(c.content, terms, phrase)
        hits.append(
            MessageHit(
                chat_id=c.thread_id,
                chat_title=chat.title,
                message_index=c.position,
                role=c.role,  # type: ignore[arg-type]
                sent_at=c.sent_at,
                snippet=_snippet_around(c.content, matched.position if matched else 0),
                matched_terms=matched.terms if matched else [],
                score=matched.score if matched else 0.0,
                chat_last_activity=chat.last_activity,
            )
        )
    return hits


async def get_conversation_summary(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver | None,
    user_id: str,
    chat_id: str | None = None,
    current: CurrentThread | None = None,
) -> ConversationSummary:
    """The running summary of one chat (the latest, or the current one in a run, when ``chat_id`` is None)."""
    chat = await _user_chat(store, user_id, chat_id, current)
    (thread,) = await _read_threads(checkpointer, [chat], current)
    covered = thread.summarized_count()
    recent = [MessageView(index=i, role=role, text=_clip(text, 600)) for i, role, text in _conversation(thread.messages, covered)]
    return ConversationSummary(
        chat_id=chat.thread_id,
        title=chat.title,
        persona=chat.persona,
        created_at=chat.created_at,
        last_activity=chat.last_activity,
        message_count=len(thread.messages) or chat.message_count,
        summary=thread.board,
        summary_text=thread.board.render(),
        summary_folds=thread.summary_folds,
        summarized_messages=covered,
        recent_messages=recent[-RECENT_MESSAGES:],
    )


_BOARD_FIELD = {"action_items": "action_items", "pending_questions": "pending_questions", "entities": "entities", "facts": "key_facts"}


def _said_in(item: Fact | Task, chat_id: str) -> bool:
    """Whether any message of chat ``chat_id`` said the fact or task: any of its sources, not only the
    first (``source_thread``), which left out what a later chat said again or changed."""
    return item.source_thread == chat_id or any(s.thread_id == chat_id for s in item.sources)


async def recall_context(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver | None,
    user_id: str,
    context_type: ContextType,
    chat_id: str | None = None,
    current: CurrentThread | None = None,
) -> RecalledContext:
    """One kind of remembered context, from one chat or (``chat_id`` None) all of the user's chats.

    - action_items, pending_questions, entities: from the chats' summary boards;
    - facts: the user's active long-term facts, plus the boards' key facts;
    - tasks: the user's stored tasks (those created in the chat, when one is given).

    Items from summaries come newest chat first, without repeats.
    """
    if context_type not in CONTEXT_TYPES:
        raise ValueError(f"context_type must be one of {', '.join(CONTEXT_TYPES)}")
    chat_id = _chat_id(chat_id)
    if chat_id is not None:
        chats = [await _user_chat(store, user_id, chat_id, current)]
    else:
        chats = (await _own_chats(store, user_id))[:RECALL_CHAT_LIMIT]
    items: list[RecalledItem] = []

    if context_type == "tasks":
        tasks = await stored_tasks(store, user_id)
        if chat_id is not None:
            tasks = [t for t in tasks if _said_in(t, chat_id)]
        # Unfinished first, then newest change first.
        tasks.sort(key=lambda t: (t.status == "done", -t.updated_at.timestamp()))
        titles = {c.thread_id: c.title for c in chats}
        items = [
            RecalledItem(
                text=t.description,
                source="long_term_memory",
                chat_id=t.source_thread,
                chat_title=titles.get(t.source_thread or ""),
                id=t.id,
                status=t.status,
                due=t.due,
                due_date=t.due_date,
                updated_at=t.updated_at,
            )
            for t in tasks
        ]
        return RecalledContext(context_type=context_type, chat_id=chat_id, chats_considered=len(chats), items=items)

    if context_type == "facts":
        facts = await list_facts(store, user_id)
        if chat_id is not None:
            facts = [f for f in facts if _said_in(f, chat_id)]
        facts.sort(key=lambda f: f.updated_at, reverse=True)
        items = [
            RecalledItem(
                text=f.text,
                source="long_term_memory",
                chat_id=f.source_thread,
                id=f.id,
                importance=f.importance,
                updated_at=f.updated_at,
            )
            for f in facts
        ]

    seen = {normalize_text(i.text) for i in items}
    board_field = _BOARD_FIELD[context_type]
    for chat, thread in zip(chats, await _read_threads(checkpointer, chats, current)):
        for text in getattr(thread.board, board_field):
            key = normalize_text(text)
            if not key or key in seen:
                continue
            seen.add(key)
            items.append(
                RecalledItem(text=text.strip(), source="chat_summary", chat_id=chat.thread_id, chat_title=chat.title, updated_at=chat.last_activity)
            )
    return RecalledContext(context_type=context_type, chat_id=chat_id, chats_considered=len(chats), items=items)


def _chat_match(ranked: chat_search.RankedChat) -> ChatMatch:
    chat = ranked.chat
    return ChatMatch(
        chat_id=chat.thread_id,
        title=chat.title,
        summary_snippet=_clip(chat.summary_text, 300),
        similarity=round(ranked.similarity, 3),
        words=round(ranked.words, 3),
        recency=round(ranked.recency, 3),
        score=round(ranked.score, 3),
        message_count=chat.message_count,
        created_at=chat.created_at,
        last_activity=chat.last_activity,
    )


async def search_chats(store: BaseStore, user_id: str, query: str, limit: int = 10) -> ChatSearch:
    """The user's chats about ``query``, ranked as everywhere else a chat is looked up
    (memory.chat_search: weighted similarity of the chat's summary, shared words and recency).

    A blank query lists the most recent chats. Chats below the similarity floor are left out.
    """
    limit, now = _clamp(limit), utcnow()
    if not query.strip():
        recent = [(c, 0.0) for c in (await _own_chats(store, user_id))[:limit]]
        return ChatSearch(query=query, chats=[_chat_match(r) for r in chat_search.rank(recent, now)])
    ranked = await chat_search.ranked_chats(store, user_id, query, now=now, limit=max(20, limit * 3))
    ranked = [r for r in ranked if r.similarity >= chat_search.MIN_SIMILARITY]
    return ChatSearch(query=query, chats=[_chat_match(r) for r in ranked[:limit]])


async def list_tasks(
    store: BaseStore, user_id: str, status: TaskStatus | None = None, *, include_done: bool = True, with_invalid: bool = False
) -> TaskList:
    """The user's tasks, oldest first; only those with ``status`` when given, without done ones
    when not ``include_done``; ``with_invalid`` adds the stored tasks that do not validate."""
    if status is not None and status not in ("open", "in_progress", "done"):
        raise ValueError("status must be open, in_progress or done")
    tasks = await stored_tasks(store, user_id, include_done=include_done)
    if status is not None:
        tasks = [t for t in tasks if t.status == status]
    invalid = InvalidItemOut.of(await invalid_items(store, user_id, ("tasks",))) if with_invalid else []
    return TaskList(status=status, count=len(tasks), tasks=tasks, invalid=invalid)


class InstallationCounts(BaseModel):
    size: str = Field(description="The database's size, as Postgres prints it.")
    threads: int = Field(description="Chat threads with checkpoints, every user's.")
    items: int = Field(description="Memory items in the store, every user's.")
    embeddings: dict[str, Any] = Field(default_factory=dict, description="The embedding model recorded as the one that built the vectors ({} before the first start).")


async def installation_counts(store: BaseStore) -> InstallationCounts:
    """What the whole installation holds (``memory-agent doctor``): the one read of every user's data."""
    pool = memory_store(store).pool
    return InstallationCounts(**await store_rows.counts(pool), embeddings=await embeddings_record.read_record(pool) or {})
