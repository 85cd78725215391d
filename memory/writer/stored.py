"""Reads the writer makes inside its transaction (``tx``): a stored item as its model, facts and
tasks found by an indexed field. Shared by the writer's modules; entry points read through
memory.queries instead."""

from __future__ import annotations

from core.namespaces import facts_ns, tasks_ns
from core.schemas import Fact, Task
from memory.kinds import KINDS
from memory.user_memory import parse_fact, parse_item, parse_task
from storage.store_lookups import items_where


async def valid_stored(tx, kind: str, user_id: str, key: str):
    """The user's stored ``kind`` item ``key`` as its model; None when absent or invalid."""
    item = await tx.aget(KINDS[kind].namespace(user_id), key)
    return parse_item(kind, item) if item else None


async def facts_where(tx, user_id: str, field_name: str, values: list[str]) -> list[Fact]:
    return [f for f in (parse_fact(user_id, k, v) for k, v in await items_where(tx, facts_ns(user_id), field_name, values)) if f]


async def tasks_with_hash(tx, user_id: str, h: str) -> list[tuple[Task, float]]:
    found = await items_where(tx, tasks_ns(user_id), "hash", [h], status=None, limit=5)
    return [(t, 1.0) for t in (parse_task(user_id, k, v) for k, v in found) if t]
