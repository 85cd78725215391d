"""Apply one extraction result to a user's memory: validated, merged, without duplicates.

Rules, in order, for each new fact:
1. exact duplicate (same normalized-text hash as an active fact) → no new item; the
   existing fact's ``mentions`` and ``updated_at`` are bumped;
2. ``supersedes`` names an active fact → the new fact is added and the old one is
   kept with ``status=superseded``, ``superseded_by`` and ``valid_to``;
3. near duplicate (cosine ≥ ``merge_threshold`` to an active fact) → merged: the
   richer (longer) text is kept, tags are united, importance is raised one step —
   unless it gives another value for a single-valued slot (then rule 4 applies:
   "Is 30 years old" and "Is 31 years old" embed alike but contradict);
4. same single-valued slot ("Lives in …", "Works as …") with another value → supersede;
5. otherwise a new fact.
Task updates match an existing task by id, else semantically (≥ ``task_match_threshold``).
All reads and writes of one turn run in one Postgres transaction holding the user's lock
(storage.user_transaction): exactly once, whichever entry point writes.

This module is the only code that writes or deletes items in a user's memory namespaces
(tests/unit/test_one_writer.py fails otherwise): the graph, the HTTP API, the CLI, MCP and the
LangGraph store API (:func:`put_client_item`) all change memory through its functions.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import GetOp, PutOp
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from storage import episode_rewrites, forget_ledger, store_rows, vector_search
from storage.store_lookups import items_where
from storage.user_transaction import embed_ahead, lock_key, user_transaction
from core.namespaces import PROFILE_KEY, chats_ns, facts_ns, profile_ns, tasks_ns, user_root
from core.dates import date_languages, resolve_date
from core.schemas import (
    ChatRecord,
    ExtractionResult,
    Fact,
    Importance,
    NewFact,
    Preferences,
    Profile,
    Source,
    UserDocument,
    Task,
    normalize_text,
    text_hash,
    utcnow,
    with_source,
)
from core.redaction import Redactor, distinctive_stems, term_hashes
from core.errors import MemoryAgentError
from memory.kinds import KINDS, MemoryKind
from memory.user_memory import _all as all_items
from memory.user_memory import get_chat, get_user_document, invalid_item, parse_fact, parse_item, parse_task, search_facts, search_tasks

log = logging.getLogger(__name__)

MERGE_THRESHOLD = 0.9
TASK_MATCH_THRESHOLD = 0.75
TASK_DUPLICATE_THRESHOLD = 0.92

# Facts of which a user has one value at a time: a new value supersedes the old.
# Each slot is recognised by patterns on the normalized text ("is 30 years old" and
# "age is 30" are the same slot).
SINGLE_VALUED_SLOTS: dict[str, tuple[str, ...]] = {
    "lives in": (r"lives in ",),
    "works as": (r"works as ",),
    "works at": (r"works at ",),
    "name is": (r"(?:his |her |their |the user's )?name is ", r"is called "),
    "native language is": (r"native language is ",),
    "is married to": (r"is married to ",),
    "age": (r"age is \d", r"is \d+ years old$"),
}
_SLOT_PATTERNS = [(slot, re.compile(p)) for slot, patterns in SINGLE_VALUED_SLOTS.items() for p in patterns]

_RANK = {"low": 0, "medium": 1, "high": 2}
_BY_RANK = {v: k for k, v in _RANK.items()}


def raise_importance(a: Importance, b: Importance) -> Importance:
    """Hearing something again makes it matter more: one step above the higher of the two."""
    return _BY_RANK[min(2, max(_RANK[a], _RANK[b]) + 1)]  # type: ignore[return-value]


def slot_of(text: str) -> str | None:
    norm = normalize_text(text)
    for slot, pattern in _SLOT_PATTERNS:
        if pattern.match(norm):
            return slot
    return None


def refines(a: str, b: str) -> bool:
    """One text restates the other with more detail ("Lives in Haifa" / "Lives in Haifa, Israel")."""
    na, nb = normalize_text(a), normalize_text(b)
    return na in nb or nb in na


def contradicts(new_text: str, old_text: str) -> bool:
    """Another value for the same single-valued slot: an update, never a merge."""
    slot = slot_of(new_text)
    return slot is not None and slot_of(old_text) == slot and not refines(new_text, old_text)


def preference_in_words(key: str, value: Any) -> list[str]:
    """A preference as a person would say it ("prefers bullet points"), never "prefers_bullets = True"."""
    if key == "other_notes":
        return [str(v) for v in value]
    if key == "prefers_bullets":
        return ["prefers bullet points" if value else "prefers no bullet points"]
    if key == "code_examples":
        return ["wants code examples" if value else "wants no code examples"]
    if key == "answer_length":
        return [f"prefers {value} answers"]
    if key == "language":
        return [f"prefers answers in {value}"]
    if key == "tone":
        return [f"prefers a {value} tone"]
    return [f"prefers {key.replace('_', ' ')}: {value}"]


@dataclass
class WriteReport:
    facts_added: list[str] = field(default_factory=list)
    facts_merged: list[str] = field(default_factory=list)
    facts_superseded: list[dict] = field(default_factory=list)
    duplicates_dropped: list[str] = field(default_factory=list)
    profile_changes: dict = field(default_factory=dict)
    preference_changes: dict = field(default_factory=dict)
    tasks_added: list[str] = field(default_factory=list)
    tasks_updated: list[str] = field(default_factory=list)
    tasks_completed: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not any(asdict(self).values())

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v}

    def written_counts(self) -> dict[str, int]:
        """What was written, per change of a memory kind ("facts_added": 2, "profile": 1), for the metric;
        duplicates dropped wrote nothing."""
        counts = {name: len(v) for name, v in asdict(self).items() if isinstance(v, list) and v and name.split("_")[0] in KINDS}
        if self.profile_changes or self.preference_changes:
            counts["profile"] = 1
        return counts

    def describe(self) -> str:
        """One line for the CLI: what was remembered or updated."""
        parts: list[str] = []
        for key, value in self.profile_changes.items():
            parts.append(f"{key} = {', '.join(value) if isinstance(value, list) else value}")
        for key, value in self.preference_changes.items():
            parts += preference_in_words(key, value)
        parts += [f"+ {t}" for t in self.facts_added]
        parts += [f"~ {t}" for t in self.facts_merged]
        parts += [f"{s['old']} → {s['new']}" for s in self.facts_superseded]
        parts += [f"task + {t}" for t in self.tasks_added]
        parts += [f"task ~ {t}" for t in self.tasks_updated]
        parts += [f"task ✓ {t}" for t in self.tasks_completed]
        return "; ".join(parts)


async def apply_extraction(
    store,
    user_id: str,
    result: ExtractionResult,
    *,
    thread_id: str | None = None,
    message_id: str | None = None,
    now: datetime | None = None,
    merge_threshold: float = MERGE_THRESHOLD,
    by: str = "model",
    rule_texts: frozenset[str] = frozenset(),
    said_at: datetime | None = None,
) -> WriteReport:
    """Apply ``result`` exactly once, whatever else writes this user's memory at the same time.

    Texts are embedded first, in one batch; then one transaction holding the user's lock reads
    what it needs (by index and bounded vector search, never a whole namespace) and writes.
    Each item records its source: the message (``thread_id``, ``message_id``), its time and what
    wrote it (``by``; "rules" for the texts in ``rule_texts``, which the extraction rules found).
    Nothing the user had forgotten is written again (storage.forget_ledger): whoever calls.
    """
    now = now or utcnow()
    if result.is_empty():  # most turns: nothing to read or write
        return WriteReport()
    await embed_ahead(store, [f.text for f in result.new_facts] + [u.description for u in result.task_updates])
    source = Source(thread_id=thread_id, message_id=message_id, said_at=said_at or now, by=by) if thread_id or message_id or by != "model" else None
    rules = {normalize_text(t) for t in rule_texts}

    def source_of(text: str) -> Source | None:
        if source is None or normalize_text(text) not in rules:
            return source
        return source.model_copy(update={"by": "rules"})

    async with user_transaction(store, user_id) as tx:
        result = without_forgotten(result, await forget_ledger.redactor_of_store(tx, user_id))
        report = WriteReport()
        ops: list[PutOp] = []
        await _apply_profile(tx, user_id, result, now, report, ops, source_of)
        await _apply_facts(tx, user_id, result, now, report, ops, thread_id, message_id, merge_threshold, source_of)
        await _apply_tasks(tx, user_id, result, now, report, ops, thread_id, message_id, source_of)
        if ops:
            await tx.abatch(ops)
    return report


def without_forgotten(result: ExtractionResult, redactor: Redactor) -> ExtractionResult:
    """``result`` less every fact, field, preference and task that carries something the user had
    forgotten: no extraction, rule or import brings it back."""
    if not redactor:
        return result

    def fields(section) -> dict:
        return {k: (None if isinstance(v, str) and redactor.carries(v) else [x for x in v if not redactor.carries(x)] if isinstance(v, list) else v)
                for k, v in section.model_dump(exclude_unset=False).items()}

    kept = result.model_copy(
        update={
            "new_facts": [f for f in result.new_facts if not redactor.carries(f.text)],
            "task_updates": [t for t in result.task_updates if not redactor.carries(t.description)],
            "profile_updates": type(result.profile_updates).model_validate(fields(result.profile_updates)),
            "new_preferences": type(result.new_preferences).model_validate(fields(result.new_preferences)),
        }
    )
    if kept != result:
        log.info("extraction: left out what the user had forgotten")
    return kept


def _merge_fields(section, updates: dict, list_field: str, unset: tuple, changes: dict) -> bool:
    """Set the changed scalar fields of one document section and extend its list field with
    the entries not already there (compared normalized); record what changed; True when any did."""
    changed = False
    for name, value in updates.items():
        if name == list_field:
            known = {normalize_text(x) for x in getattr(section, list_field)}
            added = [v for v in value if normalize_text(v) not in known]
            if added:
                getattr(section, list_field).extend(added)
                changes[list_field] = added
                changed = True
        elif value not in unset and getattr(section, name) != value:
            setattr(section, name, value)
            changes[name] = value
            changed = True
    return changed


async def _apply_profile(tx, user_id: str, result: ExtractionResult, now: datetime, report: WriteReport, ops: list, source_of=lambda _t: None) -> None:
    """Profile and preferences: one document, changed fields only; each changed field records its source."""
    doc = await get_user_document(tx, user_id)
    doc_changed = _merge_fields(doc.profile, result.profile_updates.model_dump(), "goals", (None, ""), report.profile_changes)
    doc_changed = _merge_fields(doc.preferences, result.new_preferences.model_dump(), "other_notes", (None,), report.preference_changes) or doc_changed
    for part, changes in (("profile", report.profile_changes), ("preferences", report.preference_changes)):
        for name, value in changes.items():
            src = source_of(", ".join(value) if isinstance(value, list) else str(value))
            key = f"{part}.{name}"
            if src is not None:
                # A new value of a scalar field starts its history anew; a list field's entries add theirs.
                doc.sources[key] = with_source(doc.sources.get(key, []) if isinstance(value, list) else [], src)
    if doc_changed:
        doc.updated_at = now
        ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))


async def _valid_stored(tx, kind: str, user_id: str, key: str):
    """The user's stored ``kind`` item ``key`` as its model; None when absent or invalid."""
    item = await tx.aget(KINDS[kind].namespace(user_id), key)
    return parse_item(kind, item) if item else None


async def _facts_where(tx, user_id: str, field_name: str, values: list[str]) -> list[Fact]:
    return [f for f in (parse_fact(user_id, k, v) for k, v in await items_where(tx, facts_ns(user_id), field_name, values)) if f]


async def _apply_facts(
    tx, user_id: str, result: ExtractionResult, now: datetime, report: WriteReport, ops: list,
    thread_id: str | None, message_id: str | None, merge_threshold: float, source_of=lambda _t: None,
) -> None:
    new_facts = _dedupe_batch(result.new_facts)
    if not new_facts:
        return
    # What this batch can collide with, found by index: the same text, the same slot, named ones.
    hashes = [text_hash(nf.text) for nf in new_facts]
    slots = sorted({s for s in (slot_of(nf.text) for nf in new_facts) if s})
    active: dict[str, Fact] = {f.id: f for f in await _facts_where(tx, user_id, "hash", hashes)}
    by_slot: dict[str, list[Fact]] = {}
    for f in await _facts_where(tx, user_id, "slot", slots):
        active[f.id] = f
        by_slot.setdefault(f.slot or "", []).append(f)
    for nf in new_facts:
        if nf.supersedes and nf.supersedes not in active:
            named = await _valid_stored(tx, "facts", user_id, nf.supersedes)
            if named and named.status == "active":
                active[named.id] = named
    by_hash = {f.hash or text_hash(f.text): f for f in active.values()}
    touched: dict[str, Fact] = {}
    reembed: set[str] = set()  # facts whose text is new or changed; the others keep their vectors

    def stage(fact: Fact, *, text_changed: bool = False) -> None:
        touched[fact.id] = fact
        if text_changed:
            reembed.add(fact.id)

    for nf in new_facts:
        h = text_hash(nf.text)
        if h in by_hash:
            existing = touched.get(by_hash[h].id, by_hash[h])
            existing.mentions += 1
            existing.updated_at = now
            existing.sources = with_source(existing.sources, source_of(nf.text))
            stage(existing)
            report.duplicates_dropped.append(nf.text)
            continue
        # A microsecond apart, so facts of one turn list in the order they were extracted.
        created = now + timedelta(microseconds=len(touched))
        slot = slot_of(nf.text)
        new = Fact(
            id=str(uuid.uuid4()),
            text=nf.text,
            importance=nf.importance,
            tags=sorted(set(nf.tags)),
            hash=h,
            slot=slot,
            created_at=created,
            updated_at=created,
            source_thread=thread_id,
            source_message_id=message_id,
            sources=with_source([], source_of(nf.text)),
        )
        old = active.get(nf.supersedes or "") if nf.supersedes else None
        if old is None:
            similar = [(touched.get(f.id, f), s) for f, s in await search_facts(tx, user_id, nf.text, limit=5)]
            similar = [(f, s) for f, s in similar if f.status == "active"]
            best = similar[0] if similar else None
            if best and best[1] >= merge_threshold and not contradicts(nf.text, best[0].text):
                target = best[0]
                richer = len(nf.text) > len(target.text)
                if richer:
                    target.text, target.hash = nf.text, h
                target.importance = raise_importance(target.importance, nf.importance)
                target.tags = sorted(set(target.tags) | set(nf.tags))
                target.mentions += 1
                target.updated_at = now
                target.sources = with_source(target.sources, source_of(nf.text))
                stage(target, text_changed=richer)
                by_hash[h] = target
                report.facts_merged.append(target.text)
                continue
            if slot:
                # Indexed by slot, plus related facts stored before facts carried their slot.
                candidates = by_slot.get(slot, []) + [f for f, _ in similar]
                old = next((f for f in candidates if f.status == "active" and f.id not in touched and slot_of(f.text) == slot), None)
        if old is not None:
            old = touched.get(old.id, old)
            old.status = "superseded"
            old.superseded_by = new.id
            old.valid_to = now
            old.updated_at = now
            stage(old)
            active.pop(old.id, None)
            report.facts_superseded.append({"old": old.text, "new": new.text})
        stage(new, text_changed=True)
        active[new.id] = new
        by_hash[h] = new
        if slot:
            by_slot.setdefault(slot, []).insert(0, new)
        report.facts_added.append(new.text)
    for fact in touched.values():
        ops.append(PutOp(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=None if fact.id in reembed else False))


async def _apply_tasks(
    tx, user_id: str, result: ExtractionResult, now: datetime, report: WriteReport, ops: list,
    thread_id: str | None, message_id: str | None, source_of=lambda _t: None,
) -> None:
    staged: dict[str, Task] = {}
    for upd in result.task_updates:
        wanted = normalize_text(upd.description)
        target = staged.get(upd.task_id or "")
        if target is None and upd.task_id:
            target = await _valid_stored(tx, "tasks", user_id, upd.task_id)
        similar = [(staged.get(t.id, t), s) for t, s in await search_tasks(tx, user_id, upd.description, limit=3)]
        open_similar = [(t, s) for t, s in similar if t.status in ("open", "in_progress")]
        if target is None and upd.action != "add":
            if open_similar and open_similar[0][1] >= TASK_MATCH_THRESHOLD:
                target = open_similar[0][0]
        if upd.action == "add":
            same_text = [t for t, _ in await _tasks_with_hash(tx, user_id, text_hash(upd.description))]
            exact = next((staged.get(t.id, t) for t in same_text if staged.get(t.id, t).status in ("open", "in_progress")), None)
            exact = exact or next((t for t in staged.values() if normalize_text(t.description) == wanted and t.status in ("open", "in_progress")), None)
            if exact or (open_similar and open_similar[0][1] >= TASK_DUPLICATE_THRESHOLD):
                continue  # already on the list
            description = upd.description.strip()
            task = Task(id=str(uuid.uuid4()), description=description, hash=text_hash(description), due=upd.due, due_date=upd.due_date,
                        created_at=now, updated_at=now, source_thread=thread_id, source_message_id=message_id,
                        sources=with_source([], source_of(description)))
            staged[task.id] = task
            ops.append(PutOp(tasks_ns(user_id), task.id, task.model_dump(mode="json")))
            report.tasks_added.append(task.description)
        elif target is None:
            log.info("task %s for %r matched no stored task; ignored", upd.action, upd.description)
        elif upd.action == "complete" or upd.status == "done":
            if target.status != "done":
                target.status, target.completed_at, target.updated_at = "done", now, now
                staged[target.id] = target
                ops.append(PutOp(tasks_ns(user_id), target.id, target.model_dump(mode="json"), index=False))
                report.tasks_completed.append(target.description)
        else:
            if upd.status:
                target.status = upd.status
            if upd.due:
                target.due, target.due_date = upd.due, upd.due_date
            target.updated_at = now
            staged[target.id] = target
            ops.append(PutOp(tasks_ns(user_id), target.id, target.model_dump(mode="json"), index=False))
            report.tasks_updated.append(target.description)


async def _tasks_with_hash(tx, user_id: str, h: str) -> list[tuple[Task, float]]:
    found = await items_where(tx, tasks_ns(user_id), "hash", [h], status=None, limit=5)
    return [(t, 1.0) for t in (parse_task(user_id, k, v) for k, v in found) if t]


def _dedupe_batch(facts: list[NewFact]) -> list[NewFact]:
    seen: set[str] = set()
    out = []
    for f in facts:
        h = text_hash(f.text)
        if h not in seen:
            seen.add(h)
            out.append(f)
    return out


# --------------------------------------------------------------------------- abandoned branches


@dataclass
class Retraction:
    facts: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)


async def retract_taught_by(store, user_id: str, message_ids: list[str], *, now: datetime | None = None) -> Retraction:
    """Retract the facts and tasks that only the given messages taught (the user edited them away,
    or regenerated their reply): facts become superseded and tasks retracted, both kept for history.

    A fact another message repeated since (``mentions`` > 1) stays: something still on the
    conversation said it too.
    """
    now = now or utcnow()
    done = Retraction()
    if not message_ids:
        return done
    async with user_transaction(store, user_id) as tx:
        ops: list[PutOp] = []
        for key, value in await items_where(tx, facts_ns(user_id), "source_message_id", message_ids, limit=200):
            fact = parse_fact(user_id, key, value)
            if fact is None or fact.mentions > 1:
                continue
            fact.status, fact.valid_to, fact.updated_at = "superseded", now, now
            ops.append(PutOp(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=False))
            done.facts.append(fact.text)
        for key, value in await items_where(tx, tasks_ns(user_id), "source_message_id", message_ids, status=None, limit=200):
            task = parse_task(user_id, key, value)
            if task is None or task.status == "retracted":
                continue
            task.status, task.updated_at = "retracted", now
            ops.append(PutOp(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=False))
            done.tasks.append(task.description)
        if ops:
            await tx.abatch(ops)
    return done


# --------------------------------------------------------------------------- edits by the user
# The memory API and the CLI change memory through these, under the same lock as extraction.


async def edit_user_document(store, user_id: str, part: str, changes: dict[str, Any] | None) -> Profile | Preferences:
    """Set the given fields of the profile or the preferences (a null clears one); ``None`` resets the part."""
    async with user_transaction(store, user_id) as tx:
        doc = await get_user_document(tx, user_id)
        now = utcnow()
        if changes is None:
            setattr(doc, part, Profile() if part == "profile" else Preferences())
        else:
            target = getattr(doc, part)
            for name, value in changes.items():
                if value is None and isinstance(getattr(target, name), list):
                    value = []  # null clears a list field too
                setattr(target, name, value)
                doc.sources[f"{part}.{name}"] = [Source(by="user", said_at=now)] if value not in (None, [], "") else []
                await _lift_forgets(tx, user_id, value)
        doc.updated_at = now
        await tx.aput(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False)
    return getattr(doc, part)


async def edit_fact(
    store, user_id: str, fact_id: str, *, text: str | None = None, importance: Importance | None = None, tags: list[str] | None = None
) -> Fact | None:
    """Correct a stored fact (None when there is no valid fact with that id). A new text is re-embedded."""
    if text is not None:
        text = text.strip()
        await embed_ahead(store, [text])
    async with user_transaction(store, user_id) as tx:
        fact = await _valid_stored(tx, "facts", user_id, fact_id)
        if fact is None:
            return None
        if text is not None:
            fact.text, fact.hash, fact.slot = text, text_hash(text), slot_of(text)
            fact.sources = with_source(fact.sources, Source(by="user", said_at=utcnow()))
            await _lift_forgets(tx, user_id, text)
        if importance is not None:
            fact.importance = importance
        if tags is not None:
            fact.tags = sorted({t.strip() for t in tags if t.strip()})
        fact.updated_at = utcnow()
        await tx.aput(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=None if text is not None else False)
    return fact


async def edit_task(store, user_id: str, task_id: str, changes: dict[str, Any]) -> Task | None:
    """Change a task's description, status or due date (None when there is no valid task with that id)."""
    description = (changes.get("description") or "").strip()
    if description:
        await embed_ahead(store, [description])
    async with user_transaction(store, user_id) as tx:
        task = await _valid_stored(tx, "tasks", user_id, task_id)
        if task is None:
            return None
        now = utcnow()
        if description:
            task.description, task.hash = description, text_hash(description)
            await _lift_forgets(tx, user_id, description)
        status = changes.get("status")
        if status is not None and status != task.status:
            task.status = status
            task.completed_at = now if status == "done" else None
        if "due" in changes:  # words the user types now mean a date from now
            task.due, task.due_date = changes["due"], resolve_date(changes["due"], now, date_languages(changes["due"] or ""))
        task.updated_at = now
        await tx.aput(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=None if description else False)
    return task


async def delete_item(store, user_id: str, kind: str, item_id: str) -> bool:
    """Delete one fact or task by id, valid or not; False when there is none."""
    namespace = KINDS[kind].namespace(user_id)
    async with user_transaction(store, user_id) as tx:
        if await tx.aget(namespace, item_id) is None:
            return False
        await tx.adelete(namespace, item_id)
    return True


async def forget_fact(store, user_id: str, fact_id: str, *, now: datetime | None = None) -> Fact | None:
    """Forget one active fact (the CLI's ``/forget``): it leaves recall and the lists of active facts,
    and is kept as superseded with ``valid_to``, like any replaced fact, so its history stays.
    None when there is no active fact with that id."""
    now = now or utcnow()
    async with user_transaction(store, user_id) as tx:
        fact = await _valid_stored(tx, "facts", user_id, fact_id)
        if fact is None or fact.status != "active":
            return None
        fact.status, fact.valid_to, fact.updated_at = "superseded", now, now
        await tx.aput(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=False)
    return fact


# --------------------------------------------------------------------------- MCP's remember


class Remembered(BaseModel):
    """What ``remember`` did with the fact."""

    remembered: bool
    described: str = Field(description="What changed, in words (empty when nothing did, e.g. the user had forgotten it).")


async def remember_fact(store, user_id: str, text: str) -> Remembered:
    """Remember one fact told by another agent (MCP), under the same rules and provenance as extraction."""
    fact = NewFact(text=text.strip())
    report = await apply_extraction(store, user_id, ExtractionResult(new_facts=[fact]), by="remember")
    return Remembered(remembered=not report.is_empty(), described=report.describe())


# --------------------------------------------------------------------------- forgetting
# The store half of a forget (memory.forgetting does the derived copies after it): in one transaction
# holding the user's lock, the forget is recorded (storage.forget_ledger) and every fact, task, profile
# field and preference that carries its words, or came only from its messages, goes.


@dataclass
class ForgetWrite:
    forget_id: str = ""
    forgotten: list[str] = field(default_factory=list)
    facts: int = 0
    tasks: int = 0
    fields: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    refs: list[tuple[str, str]] = field(default_factory=list)
    redactor: Redactor = field(default_factory=Redactor)


def field_label(part: str, name: str, value) -> str:
    if part == "preferences":
        return "; ".join(preference_in_words(name, value))
    return f"{name}: {', '.join(value) if isinstance(value, list) else value}"


def value_texts(part: str, name: str, value) -> list[str]:
    if value in (None, "", []):
        return []
    if part == "preferences" and isinstance(value, bool):
        return preference_in_words(name, value)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _refs(sources: list[Source], legacy: tuple[str | None, str | None] = (None, None)) -> list[tuple[str, str]]:
    refs = [(s.thread_id, s.message_id) for s in sources if s.thread_id and s.message_id]
    if legacy[0] and legacy[1]:
        refs.append((legacy[0], legacy[1]))
    return list(dict.fromkeys(refs))


async def forget_items(store, user_id: str, targets: list[tuple[str, str]], *, words: str = "", now: datetime | None = None) -> ForgetWrite | None:
    """Forget ``targets`` ((part, key): a fact or task id, a profile field or preference name) and, with
    ``words``, what carries their distinctive stems; None when there is nothing to forget."""
    now = now or utcnow()
    pool = store.conn if isinstance(getattr(store, "conn", None), AsyncConnectionPool) else None
    out = ForgetWrite()
    texts: list[str] = [words] if words.strip() and distinctive_stems(words) else []
    refs: list[tuple[str, str]] = []
    async with user_transaction(store, user_id) as tx:
        doc = await get_user_document(tx, user_id)
        cleared: set[str] = set()
        for part, key in targets:
            if part in ("facts", "tasks"):
                parsed = await _valid_stored(tx, part, user_id, key)
                if parsed is None:
                    continue
                text = parsed.text if isinstance(parsed, Fact) else parsed.description
                texts.append(text)
                out.forgotten.append(text)
                refs += _refs(parsed.sources, (parsed.source_thread, parsed.source_message_id))
            else:
                section = getattr(doc, part)
                value = getattr(section, key, None) if key in type(section).model_fields else None
                if value in (None, "", []):
                    continue
                texts += value_texts(part, key, value)
                out.forgotten.append(field_label(part, key, value))
                refs += _refs(doc.sources.get(f"{part}.{key}", []))
                cleared.add(f"{part}.{key}")
        if not texts:
            return None
        hashes = term_hashes(user_id, texts)
        # A source message that does not carry the words themselves is hidden whole.
        sources = await episode_rewrites.rows_with_words(pool, user_id, [], refs) if pool is not None and refs else []
        probe = Redactor(user_id, frozenset(hashes))
        carried = {(s.thread_id, s.message_id) for s in sources if probe.carries(s.content)}
        hidden = [r for r in refs if r not in carried]
        conn = getattr(tx, "conn", None)
        if pool is not None and conn is not None:
            kind = ",".join(sorted({p for p, _ in targets})) or "words"
            out.forget_id = await forget_ledger.record(conn, user_id, kind, hashes, hidden)
            out.redactor = await forget_ledger.redactor(conn, user_id)
        else:
            out.redactor = Redactor(user_id, frozenset(hashes), frozenset(hidden))
        named = {key for part, key in targets if part in ("facts", "tasks")}
        ops = await _forget_carriers(tx, user_id, out, lambda item, text: item.id in named or out.redactor.carries(text)
                                     or (bool(item.sources) and all(out.redactor.hides(s.thread_id, s.message_id) for s in item.sources)))
        if _forget_fields(doc, out.redactor, cleared, out):
            doc.updated_at = now
            ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))
        if ops:
            await tx.abatch(ops)
    out.texts, out.refs = texts, refs
    return out


async def _forget_carriers(tx, user_id: str, out: ForgetWrite, goes) -> list[PutOp]:
    """Deletes of the facts (superseded history included) and tasks for which ``goes(item, text)``."""
    ops: list[PutOp] = []
    for part, ns in (("facts", facts_ns(user_id)), ("tasks", tasks_ns(user_id))):
        for item in await all_items(tx, ns):
            parsed = parse_item(part, item)
            if parsed is not None and goes(parsed, parsed.text if isinstance(parsed, Fact) else parsed.description):
                ops.append(PutOp(ns, parsed.id, None))
                setattr(out, part, getattr(out, part) + 1)
    return ops


async def forget_message_items(store, user_id: str, thread_id: str, message_id: str) -> ForgetWrite:
    """Hide one message whole (the user deleted it outright): recorded, and the facts and tasks only it taught deleted."""
    out = ForgetWrite(forgotten=[f"message {message_id}"], refs=[(thread_id, message_id)])
    async with user_transaction(store, user_id) as tx:
        conn = getattr(tx, "conn", None)
        if conn is not None:
            out.forget_id = await forget_ledger.hide_message(conn, user_id, thread_id, message_id)
        out.redactor = Redactor(user_id, frozenset(), frozenset({(thread_id, message_id)}))

        def only_from_it(item, _text) -> bool:
            refs = _refs(item.sources, (item.source_thread, item.source_message_id))
            return bool(refs) and all(out.redactor.hides(t, m) for t, m in refs)

        ops = await _forget_carriers(tx, user_id, out, only_from_it)
        if ops:
            await tx.abatch(ops)
    return out


def _forget_fields(doc: UserDocument, redactor: Redactor, cleared: set[str], report: "ForgetWrite") -> bool:
    """Clear the named fields and every field whose value carries the forgotten words."""
    changed = False
    for part in ("profile", "preferences"):
        section = getattr(doc, part)
        for name in type(section).model_fields:
            value = getattr(section, name)
            key = f"{part}.{name}"
            if isinstance(value, list):
                kept = [v for v in value if not redactor.carries(v)]
                if key in cleared:
                    kept = []
                if kept != value:
                    setattr(section, name, kept)
                    changed = True
                    report.fields.append(key)
                    doc.sources.pop(key, None)
            elif value is not None and (key in cleared or any(redactor.carries(t) for t in value_texts(part, name, value))):
                setattr(section, name, None)
                changed = True
                report.fields.append(key)
                doc.sources.pop(key, None)
    return changed


# --------------------------------------------------------------------------- the store API's writes


async def _lift_forgets(tx, user_id: str, value: Any) -> None:
    """What the user types into their memory themselves is theirs again: the forgets of its words end."""
    texts = [str(v) for v in value] if isinstance(value, list) else [str(value)] if isinstance(value, str) else []
    if texts:
        await forget_ledger.lift_of_store(tx, user_id, texts)


class ForgottenItem(MemoryAgentError, ValueError):
    """A client wrote what the user had the agent forget."""


async def put_client_item(store, user_id: str, kind: str, key: str, value: dict[str, Any]) -> str:
    """Write an item a client put through the LangGraph store API (app/studio/store_writes.py checked it
    against its kind's model and bounds) under the same rules as extraction: a fact whose text an
    active fact already has, or a task whose description an open task already has, adds nothing
    (the fact's ``mentions`` go up). Returns the key the item now lives under."""
    spec: MemoryKind = KINDS[kind]
    item = spec.model.model_validate(value)
    if isinstance(item, (Fact, Task)) and not item.sources:
        item.sources = [Source(by="client", said_at=utcnow())]
    if isinstance(item, Fact):
        item.hash, item.slot = text_hash(item.text), item.slot or slot_of(item.text)
    elif isinstance(item, Task):
        item.hash = text_hash(item.description)
    await embed_ahead(store, [str(getattr(item, f, "") or "") for f in spec.embedded])
    async with user_transaction(store, user_id) as tx:
        redactor = await forget_ledger.redactor_of_store(tx, user_id)
        if redactor and redactor.carries(" ".join(str(getattr(item, f, "") or "") for f in ("text", "description", "summary_text"))):
            raise ForgottenItem(f"The user had the agent forget what this {kind} item says; it is not stored again.")
        if isinstance(item, Fact) and item.status == "active":
            same = [f for f in await _facts_where(tx, user_id, "hash", [item.hash]) if f.id != key]
            if same:
                same[0].mentions += 1
                same[0].updated_at = utcnow()
                await tx.aput(facts_ns(user_id), same[0].id, same[0].model_dump(mode="json"), index=False)
                return same[0].id
        if isinstance(item, Task) and item.status in ("open", "in_progress"):
            same_tasks = [t for t, _ in await _tasks_with_hash(tx, user_id, item.hash) if t.id != key and t.status in ("open", "in_progress")]
            if same_tasks:
                return same_tasks[0].id
        await tx.aput(spec.namespace(user_id), key, item.model_dump(mode="json"), index=spec.index)
    return key


async def delete_client_item(store, user_id: str, namespace: tuple[str, ...], key: str) -> None:
    """Delete one item a client named through the LangGraph store API, under the user's lock."""
    async with user_transaction(store, user_id) as tx:
        await tx.adelete(namespace, key)


# --------------------------------------------------------------------------- recall


async def mark_used(store, user_id: str, fact_ids: list[str], now: datetime | None = None) -> None:
    """Set ``last_used`` on the facts that went into the prompt, and nothing else.

    Only that one field is written (storage.store_rows.set_field), without the user's lock, so it
    never waits for an extraction, and a concurrent merge or supersede is never overwritten.
    """
    now = now or utcnow()
    if not fact_ids:
        return
    pool = getattr(store, "conn", None)
    if isinstance(pool, AsyncConnectionPool):
        await store_rows.set_field(pool, facts_ns(user_id), list(fact_ids), "last_used", now)
        return
    # Other stores (tests with an in-memory store): a plain put, text unchanged so no re-embedding.
    items = [i for i in await store.abatch([GetOp(facts_ns(user_id), k) for k in fact_ids]) if i is not None]
    await store.abatch([PutOp(i.namespace, i.key, {**i.value, "last_used": now.isoformat()}, index=False) for i in items])


# --------------------------------------------------------------------------- maintenance


async def reembed_items(store, items: list[tuple[tuple[str, ...], str, dict]], *, batch: int = 64) -> int:
    """Put every item again, values unchanged, so the store embeds them with its current model
    (``memory-agent reindex``); the profile is never embedded."""
    for start in range(0, len(items), batch):
        for namespace, key, value in items[start : start + batch]:
            await store.aput(namespace, key, value, index=None if namespace[-1] != "profile" else False)
    return len(items)


async def forget_user_memory(pool, user_id: str) -> dict[str, int]:
    """Delete every item of the user, every kind: ``{"memories": store items, <kind>: rows}``.

    The store's items go under the user's lock (an extraction running now commits before, or
    sees nothing after), a namespace's own vector index with its rows; a kind kept in a table
    of its own (``forget`` hook) reports its count under its name."""
    counts = {"memories": await store_rows.delete_under(pool, user_root(user_id), lock_key(user_id))}
    for kind in KINDS.values():
        if kind.forget is not None:
            counts[kind.name] = await kind.forget(pool, user_id)
        elif kind.namespace is not None:
            await vector_search.drop_namespace_index(pool, kind.namespace(user_id))
    return counts


# --------------------------------------------------------------------------- chat records


async def _put_chat(tx, user_id: str, chat: ChatRecord) -> None:
    # Only the summary is embedded: that is what "find the chat about X" searches.
    await tx.aput(chats_ns(user_id), chat.thread_id, chat.model_dump(mode="json"), index=["summary_text"] if chat.summary_text else False)


async def create_chat_record(store, user_id: str, record: ChatRecord) -> ChatRecord:
    """The record of a new chat (its title before any summary)."""
    async with user_transaction(store, user_id) as tx:
        await _put_chat(tx, user_id, record)
    return record


async def delete_chat_record(store, user_id: str, thread_id: str) -> None:
    async with user_transaction(store, user_id) as tx:
        await tx.adelete(chats_ns(user_id), thread_id)


async def save_chat_record(store, user_id: str, record: ChatRecord) -> ChatRecord:
    """Write a chat's record (title, searchable summary) under the user's lock; a title the user
    set in the meantime wins over the one computed here."""
    await embed_ahead(store, [record.summary_text])
    async with user_transaction(store, user_id) as tx:
        stored = await get_chat(tx, user_id, record.thread_id)
        if stored is not None and stored.title_by_user:
            record.title, record.title_by_user, record.title_topics = stored.title, True, stored.title_topics
        await _put_chat(tx, user_id, record)
    return record


async def rename_chat(store, user_id: str, fallback: ChatRecord, title: str | None) -> ChatRecord:
    """Set the chat's title for good, or (``None``) hand titling back to the agent."""
    async with user_transaction(store, user_id) as tx:
        record = await get_chat(tx, user_id, fallback.thread_id) or fallback
        if title is None:
            record.title_by_user = False
            record.title_topics = []  # retitled at the next summary
        else:
            record.title, record.title_by_user = title, True
        await _put_chat(tx, user_id, record)
    return record


async def delete_invalid(store, user_id: str, kind: str, key: str) -> bool:
    """Delete one stored item that does not validate (ItemIsValid when it does); False when absent."""
    async with user_transaction(store, user_id) as tx:
        item = await invalid_item(tx, user_id, kind, key)
        if item is None:
            return False
        await tx.adelete(item.namespace, key)
        return True
