"""Reading one user's long-term memory from the store (profile, facts, tasks, chats).

Every read goes through :func:`parse_item`: the store API lets a client write any JSON into
a user's namespaces, so an item that does not validate against its model (or whose id is
not its key) is skipped, logged and counted once (``memory_agent_invalid_items_total``),
and never breaks a turn. :func:`invalid_items` lists such items for the memory views, and
:func:`delete_invalid_item` removes one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import BaseStore, Item, SearchItem
from pydantic import BaseModel, ValidationError

from core.metrics import INVALID_ITEMS
from storage import store_lookups, vector_search
from storage.memory_store import memory_store
from core.namespaces import PROFILE_KEY, chats_ns, facts_ns, profile_ns, tasks_ns
from core.schemas import ChatRecord, Fact, Task, UserDocument
from memory.kinds import KINDS, STORE_KIND_NAMES, Kind

log = logging.getLogger(__name__)

EVERY_ITEM = 2**31 - 1  # a LIMIT no namespace reaches


@dataclass(frozen=True)
class InvalidItem:
    """A stored item of a user that does not match its model: readers skip it."""

    kind: Kind
    key: str
    error: str
    value: Any
    updated_at: datetime | None = None


class ItemIsValid(ValueError):
    """Refusing to delete an item as invalid: it validates (delete it the ordinary way)."""


# (namespace, key, updated_at) of the invalid items already logged and counted by this process.
_reported: set[tuple[tuple[str, ...], str, str]] = set()
_REPORTED_MAX = 10_000  # a bound on the memory the set may take; past it, items may be logged again


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def check_item(kind: Kind, item: Item) -> tuple[BaseModel | None, str | None]:
    """The item as its model, or None and why it does not validate."""
    if not isinstance(item.value, dict):  # written around the store's API (storage.store_values)
        return None, f"the stored value is a JSON {_json_type(item.value)}, not an object"
    try:
        parsed = KINDS[kind].model.model_validate(item.value)
    except ValidationError as exc:
        return None, _describe(exc)
    id_field = KINDS[kind].id_field
    if id_field is not None and getattr(parsed, id_field) != item.key:
        # Readers and writers address an item by its id; one stored under another key is unreachable.
        return None, f"{id_field}: {getattr(parsed, id_field)!r} is not the item's key {item.key!r}"
    return parsed, None


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _report(kind: Kind, item: Item, error: str) -> None:
    mark = (tuple(item.namespace), item.key, item.updated_at.isoformat() if item.updated_at else "")
    if mark in _reported:
        return
    if len(_reported) >= _REPORTED_MAX:
        _reported.clear()
    _reported.add(mark)
    INVALID_ITEMS.labels(kind=kind).inc()
    log.warning("skipping invalid %s item %r in %s: %s", kind, item.key, "/".join(item.namespace), error)


def parse_item(kind: Kind, item: Item) -> Any:
    """The store item as its model, or None (logged and counted once) when it does not validate.

    The one place items of a user's memory are parsed: every reader uses it.
    """
    parsed, error = check_item(kind, item)
    if error is not None:
        _report(kind, item, error)
    return parsed


_NO_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _row_item(kind: Kind, user_id: str, key: str, value: Any) -> Item:
    """A store item from a raw SQL row (storage.store_lookups), for parse_item."""
    return Item(value=value, key=key, namespace=KINDS[kind].namespace(user_id), created_at=_NO_TIME, updated_at=_NO_TIME)


def parse_fact(user_id: str, key: str, value: Any) -> Fact | None:
    return parse_item("facts", _row_item("facts", user_id, key, value))


def parse_task(user_id: str, key: str, value: Any) -> Task | None:
    return parse_item("tasks", _row_item("tasks", user_id, key, value))


def _parse_all(kind: Kind, items: list[Item]) -> list[Any]:
    return [p for p in (parse_item(kind, i) for i in items) if p is not None]


async def nearest_items(
    store: BaseStore, namespace: tuple[str, ...], query: str, *, limit: int, filter: dict | None = None
) -> list[SearchItem]:
    """The namespace's items nearest to ``query``. On Postgres through storage.vector_search: only
    this user's vectors are compared (the store's shared HNSW index, filtered afterwards, returns too
    few or wrong rows when many users share the table; benchmarks/bench_recall.py)."""
    ours = memory_store(store)
    # (Embedded only when the namespace holds vectors: a coroutine, awaited by the search if needed.)
    matches = await vector_search.search_memories(ours.conn, namespace, ours.embeddings.aembed_query(query), k=limit, filter=filter)
    return [
        SearchItem(namespace=m.namespace, key=m.key, value=m.value, created_at=m.created_at, updated_at=m.updated_at, score=m.similarity)
        for m in matches
    ]


def _parse_hits(kind: Kind, hits: list[SearchItem]) -> list[tuple[Any, float]]:
    return [(p, float(h.score or 0.0)) for h in hits if (p := parse_item(kind, h)) is not None]


async def get_user_document(store: BaseStore, user_id: str) -> UserDocument:
    """The profile document; an invalid one reads as empty (the next write replaces it)."""
    item = await store.aget(profile_ns(user_id), PROFILE_KEY)
    doc = parse_item("profile", item) if item else None
    return doc if doc is not None else UserDocument()


async def _all(store: BaseStore, namespace: tuple[str, ...], **kwargs: Any) -> list[SearchItem]:
    """Every item of ``namespace``, in one statement: the store orders a listing by ``updated_at``
    alone, which the items of one transaction share, so pages (LIMIT/OFFSET) each ordered them
    anew: some items came twice and others never (a forget left facts that carried its words)."""
    return list(await store.asearch(namespace, limit=EVERY_ITEM, **kwargs))


async def list_facts(store: BaseStore, user_id: str, *, include_superseded: bool = False) -> list[Fact]:
    filt = None if include_superseded else {"status": "active"}
    facts: list[Fact] = _parse_all("facts", await _all(store, facts_ns(user_id), filter=filt))
    return sorted(facts, key=lambda f: f.created_at)


async def search_facts(store: BaseStore, user_id: str, query: str, *, limit: int = 20) -> list[tuple[Fact, float]]:
    """Active facts by semantic similarity to ``query`` (cosine, 0..1)."""
    if not query.strip():
        return []
    hits = await nearest_items(store, facts_ns(user_id), query, filter={"status": "active"}, limit=limit)
    return _parse_hits("facts", hits)


async def stored_tasks(store: BaseStore, user_id: str, *, include_done: bool = True, newest: int | None = None) -> list[Task]:
    """The one lister of a user's tasks: oldest first, without done ones when ``include_done`` is
    False. ``newest=n`` gives the n open or in-progress tasks updated last, newest first, reading
    no more than n per status (what a turn's prompt shows). Retracted tasks (taught only by an
    edited-away message) are history and never listed."""
    if newest is not None:
        found: list[Task] = []
        for status in ("in_progress", "open"):
            found += _parse_all("tasks", await store.asearch(tasks_ns(user_id), filter={"status": status}, limit=newest))
        return sorted(found, key=lambda t: t.updated_at, reverse=True)[:newest]
    tasks: list[Task] = _parse_all("tasks", await _all(store, tasks_ns(user_id)))
    tasks = [t for t in tasks if t.status != "retracted" and (include_done or t.status != "done")]
    return sorted(tasks, key=lambda t: t.created_at)


async def search_tasks(store: BaseStore, user_id: str, query: str, *, limit: int = 10) -> list[tuple[Task, float]]:
    if not query.strip():
        return []
    hits = await nearest_items(store, tasks_ns(user_id), query, limit=limit)
    return _parse_hits("tasks", hits)


async def get_task(store: BaseStore, user_id: str, task_id: str) -> Task | None:
    item = await store.aget(tasks_ns(user_id), task_id)
    return parse_item("tasks", item) if item else None


async def get_chat(store: BaseStore, user_id: str, thread_id: str) -> ChatRecord | None:
    item = await store.aget(chats_ns(user_id), thread_id)
    return parse_item("chats", item) if item else None


async def chat_titles(store: BaseStore, user_id: str, thread_ids: list[str]) -> dict[str, str]:
    """thread id → title of those of the user's chats that exist (the title field alone)."""
    titles = await store_lookups.field_of(store, chats_ns(user_id), thread_ids, "title")
    return {t: str(title) for t, title in titles.items() if title}


async def list_chats(store: BaseStore, user_id: str) -> list[ChatRecord]:
    chats: list[ChatRecord] = _parse_all("chats", await _all(store, chats_ns(user_id)))
    return sorted(chats, key=lambda c: c.last_activity, reverse=True)


async def search_chat_summaries(store: BaseStore, user_id: str, query: str, *, limit: int = 10) -> list[tuple[ChatRecord, float]]:
    if not query.strip():
        return []
    hits = await nearest_items(store, chats_ns(user_id), query, limit=limit)
    return _parse_hits("chats", [h for h in hits if h.score is not None])


async def invalid_items(store: BaseStore, user_id: str, kinds: tuple[Kind, ...] = STORE_KIND_NAMES) -> list[InvalidItem]:
    """The user's stored items of these kinds that do not validate (what every reader skips)."""
    found: list[InvalidItem] = []
    for kind in kinds:
        spec = KINDS[kind]
        if spec.namespace is None:
            continue  # kept in a table of its own, validated on the way in
        if spec.fixed_key is not None:
            item = await store.aget(spec.namespace(user_id), spec.fixed_key)
            items: list[Item] = [item] if item else []
        else:
            items = list(await _all(store, spec.namespace(user_id)))
        for item in items:
            _, error = check_item(kind, item)
            if error is not None:
                _report(kind, item, error)
                found.append(InvalidItem(kind, item.key, error, item.value, item.updated_at))
    return found


async def invalid_item(store: BaseStore, user_id: str, kind: Kind, key: str) -> Item | None:
    """The stored item ``key`` of ``kind`` when it does not validate; None when absent, ItemIsValid when it validates."""
    if kind not in KINDS or KINDS[kind].namespace is None:
        raise ValueError(f"kind must be one of {', '.join(STORE_KIND_NAMES)}")
    item = await store.aget(KINDS[kind].namespace(user_id), key)
    if item is None:
        return None
    _, error = check_item(kind, item)
    if error is None:
        raise ItemIsValid(f"The {kind} item {key!r} is valid; it is not deleted as invalid.")
    return item


def age_days(when: datetime | None, now: datetime) -> float:
    if when is None:
        return 365.0
    return max(0.0, (now - when).total_seconds() / 86400.0)
