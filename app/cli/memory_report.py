"""What the agent remembers about a user, as JSON or readable text (CLI `memory show`, `/memory`)."""

from __future__ import annotations

from typing import Any

from core.dates import due_phrase
from memory import queries as q
from memory.queries import get_user_document, invalid_items, list_chats, list_facts, memory_sources, sources_as_json

DELETE_HINT = "memory-agent memory delete-invalid KIND KEY"


async def memory_snapshot(store, user_id: str, *, include_superseded: bool = False) -> dict[str, Any]:
    doc = await get_user_document(store, user_id)
    facts = await list_facts(store, user_id, include_superseded=include_superseded)
    tasks = (await q.list_tasks(store, user_id)).tasks
    chats = await list_chats(store, user_id)
    invalid = await invalid_items(store, user_id)
    sources = await memory_sources(store, user_id)
    return {
        "sources": sources_as_json(sources),
        "user_id": user_id,
        "profile": doc.profile.model_dump(mode="json", exclude_defaults=True),
        "preferences": doc.preferences.model_dump(mode="json", exclude_defaults=True),
        "facts": [f.model_dump(mode="json") for f in facts],
        "tasks": [t.model_dump(mode="json") for t in tasks],
        "chats": [
            {"thread_id": c.thread_id, "title": c.title, "last_activity": c.last_activity.isoformat(), "messages": c.message_count}
            for c in chats
        ],
        "invalid": [{"kind": i.kind, "key": i.key, "error": i.error, "value": i.value} for i in invalid],
    }


def _from(snap: dict[str, Any], key: str) -> str:
    found = (snap.get("sources") or {}).get(key) or []
    return f"  ({found[-1]['described']})" if found else ""


def render_snapshot(snap: dict[str, Any]) -> str:
    lines = [f"Memory of user {snap['user_id']}"]
    lines.append("Profile:" if snap["profile"] else "Profile: (nothing yet)")
    for k, v in snap["profile"].items():
        lines.append(f"  {k}: {', '.join(v) if isinstance(v, list) else v}{_from(snap, f'profile.{k}')}")
    lines.append("Preferences:" if snap["preferences"] else "Preferences: (nothing yet)")
    for k, v in snap["preferences"].items():
        lines.append(f"  {k}: {', '.join(v) if isinstance(v, list) else v}{_from(snap, f'preferences.{k}')}")
    lines.append(f"Facts ({len(snap['facts'])}):")
    for f in snap["facts"]:
        mark = " (superseded)" if f.get("status") == "superseded" else ""
        lines.append(f"  - {f['text']} [{f['importance']}]{mark}{_from(snap, 'facts/' + f['id'])}")
    lines.append(f"Tasks ({len(snap['tasks'])}):")
    for t in snap["tasks"]:
        due = f", due {due_phrase(t.get('due'), t.get('due_date'))}" if t.get("due") or t.get("due_date") else ""
        lines.append(f"  - {t['description']} ({t['status']}{due}){_from(snap, 'tasks/' + t['id'])}")
    lines.append(f"Chats ({len(snap['chats'])}):")
    for c in snap["chats"][:20]:
        lines.append(f"  - {c['thread_id']}  {c['title']}  ({c['messages']} messages, {c['last_activity'][:16]})")
    if snap.get("invalid"):
        lines.append(f"Invalid items ({len(snap['invalid'])}), ignored by the agent; delete one with `{DELETE_HINT}`:")
        for i in snap["invalid"]:
            lines.append(f"  - {i['kind']} {i['key']}: {i['error']}")
    return "\n".join(lines)
