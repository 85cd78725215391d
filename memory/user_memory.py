"""Reading one user's long-term memory from the store (profile, facts, tasks, chats)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, TypeVar

from langgraph.store.base import BaseStore, SearchItem
from pydantic import BaseModel, ValidationError

from core.namespaces import PROFILE_KEY, chats_ns, facts_ns, profile_ns, tasks_ns
from core.schemas import ChatRecord, Fact, Task, UserDocument

PAGE = 200
M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


def _parse(model: type[M], key: str, value: Any) -> M | None:
    """The item as ``model``, or None when it does not validate (an item written around our writer)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        log.warning("skipping invalid %s item %s: %s", model.__name__, key, exc.errors()[0].get("msg"))
        return None


def parse_fact(key: str, value: Any) -> Fact | None:
    return _parse(Fact, key, value)


def parse_task(key: str, value: Any) -> Task | None:
    return _parse(Task, key, value)


async def get_user_document(store: BaseStore, user_id: str) -> UserDocument:
    item = await store.aget(profile_ns(user_id), PROFILE_KEY)
    return UserDocument.model_validate(item.value) if item else UserDocument()


async def put_user_document(store: BaseStore, user_id: str, doc: UserDocument) -> None:
    # One small document, always read whole: no embedding needed.
    await store.aput(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False)


async def _all(store: BaseStore, namespace: tuple[str, ...], **kwargs: Any) -> list[SearchItem]:
    items: list[SearchItem] = []
    offset = 0
    while True:
        page = await store.asearch(namespace, limit=PAGE, offset=offset, **kwargs)
        items.extend(page)
        if len(page) < PAGE:
            return items
        offset += PAGE


async def list_facts(store: BaseStore, user_id: str, *, include_superseded: bool = False) -> list[Fact]:
    filt = None if include_superseded else {"status": "active"}
    facts = [Fact.model_validate(i.value) for i in await _all(store, facts_ns(user_id), filter=filt)]
    return sorted(facts, key=lambda f: f.created_at)


async def search_facts(store: BaseStore, user_id: str, query: str, *, limit: int = 20) -> list[tuple[Fact, float]]:
    """Active facts by semantic similarity to ``query`` (cosine, 0..1)."""
    if not query.strip():
        return []
    hits = await store.asearch(facts_ns(user_id), query=query, filter={"status": "active"}, limit=limit)
    return [(f, float(h.score or 0.0)) for h in hits if (f := parse_fact(h.key, h.value))]


async def put_fact(store: BaseStore, user_id: str, fact: Fact) -> None:
    await store.aput(facts_ns(user_id), fact.id, fact.model_dump(mode="json"))


async def delete_fact(store: BaseStore, user_id: str, fact_id: str) -> None:
    await store.adelete(facts_ns(user_id), fact_id)


async def list_tasks(store: BaseStore, user_id: str, *, include_done: bool = True) -> list[Task]:
    tasks = [Task.model_validate(i.value) for i in await _all(store, tasks_ns(user_id))]
    # Retracted tasks (taught by an edited-away message) are history: never listed as the user's tasks.
    tasks = [t for t in tasks if t.status != "retracted" and (include_done or t.status != "done")]
    return sorted(tasks, key=lambda t: t.created_at)


async def list_open_tasks(store: BaseStore, user_id: str, *, limit: int = 10) -> list[Task]:
    """The newest open or in-progress tasks, at most ``limit`` (reads no more than it returns)."""
    found: list[Task] = []
    for status in ("in_progress", "open"):
        items = await store.asearch(tasks_ns(user_id), filter={"status": status}, limit=limit)
        found += [t for i in items if (t := parse_task(i.key, i.value))]
    return sorted(found, key=lambda t: t.updated_at, reverse=True)[:limit]


async def search_tasks(store: BaseStore, user_id: str, query: str, *, limit: int = 10) -> list[tuple[Task, float]]:
    if not query.strip():
        return []
    hits = await store.asearch(tasks_ns(user_id), query=query, limit=limit)
    return [(t, float(h.score or 0.0)) for h in hits if (t := parse_task(h.key, h.value))]


async def get_task(store: BaseStore, user_id: str, task_id: str) -> Task | None:
    item = await store.aget(tasks_ns(user_id), task_id)
    return parse_task(task_id, item.value) if item else None


async def put_task(store: BaseStore, user_id: str, task: Task) -> None:
    await store.aput(tasks_ns(user_id), task.id, task.model_dump(mode="json"))


async def get_chat(store: BaseStore, user_id: str, thread_id: str) -> ChatRecord | None:
    item = await store.aget(chats_ns(user_id), thread_id)
    return ChatRecord.model_validate(item.value) if item else None


async def put_chat(store: BaseStore, user_id: str, chat: ChatRecord) -> None:
    # Only the summary is embedded: that is what "find the chat about X" searches.
    await store.aput(chats_ns(user_id), chat.thread_id, chat.model_dump(mode="json"), index=["summary_text"] if chat.summary_text else False)


async def list_chats(store: BaseStore, user_id: str) -> list[ChatRecord]:
    chats = [ChatRecord.model_validate(i.value) for i in await _all(store, chats_ns(user_id))]
    return sorted(chats, key=lambda c: c.last_activity, reverse=True)


async def search_chats(store: BaseStore, user_id: str, query: str, *, limit: int = 10) -> list[tuple[ChatRecord, float]]:
    if not query.strip():
        return []
    hits = await store.asearch(chats_ns(user_id), query=query, limit=limit)
    return [(ChatRecord.model_validate(h.value), float(h.score or 0.0)) for h in hits if h.score is not None]


def age_days(when: datetime | None, now: datetime) -> float:
    if when is None:
        return 365.0
    return max(0.0, (now - when).total_seconds() / 86400.0)
