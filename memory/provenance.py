"""Where each memory came from, as a person reads it: "from your message of 3 May 2026, in
'Moving to Lisbon'" (the read side of ``core.schemas.Source``, for the API, MCP and /memory)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from core.schemas import Fact, Source, Task
from memory.user_memory import chat_titles, get_user_document, list_facts, stored_tasks


class SourceView(BaseModel):
    thread_id: str | None = None
    message_id: str | None = None
    said_at: str | None = None
    by: str
    chat_title: str | None = None
    described: str
    """"from your message of 3 May 2026, in 'Moving to Lisbon' (rules)"."""


def describe(source: Source, titles: dict[str, str]) -> SourceView:
    when = f" of {source.said_at.day} {source.said_at:%B %Y}" if source.said_at else ""
    title = titles.get(source.thread_id or "")
    where = f", in '{title}'" if title else ""
    text = f"from your message{when}{where}" if source.message_id else f"written by {source.by}"
    if source.message_id:
        text += f" ({source.by})"
    return SourceView(
        thread_id=source.thread_id, message_id=source.message_id, said_at=source.said_at.isoformat() if source.said_at else None,
        by=source.by, chat_title=title, described=text,
    )


def _legacy(item: Fact | Task) -> list[Source]:
    """Items written before sources were kept name one message."""
    if item.sources:
        return item.sources
    return [Source(thread_id=item.source_thread, message_id=item.source_message_id, by="model")] if item.source_message_id else []


async def memory_sources(store, user_id: str) -> dict[str, list[SourceView]]:
    """Every remembered item's sources, keyed "profile.role", "preferences.tone", "facts/<id>", "tasks/<id>"."""
    doc = await get_user_document(store, user_id)
    facts = await list_facts(store, user_id)
    tasks = await stored_tasks(store, user_id)
    raw: dict[str, list[Source]] = {k: v for k, v in doc.sources.items() if v}
    raw.update({f"facts/{f.id}": _legacy(f) for f in facts})
    raw.update({f"tasks/{t.id}": _legacy(t) for t in tasks})
    threads = sorted({s.thread_id for v in raw.values() for s in v if s.thread_id})
    titles = await chat_titles(store, user_id, threads) if threads else {}
    return {k: [describe(s, titles) for s in v] for k, v in raw.items() if v}


def as_json(views: dict[str, list[SourceView]]) -> dict[str, Any]:
    return {k: [v.model_dump() for v in vs] for k, vs in views.items()}
