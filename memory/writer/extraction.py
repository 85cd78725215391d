"""Apply one extraction result to a user's memory: validated, merged, without duplicates.

Rules, in order, for each new fact:
1. exact duplicate (same normalized-text hash as an active fact) → no new item; the
   existing fact's ``mentions`` and ``updated_at`` are bumped;
2. ``supersedes`` names an active fact → the new fact is added and the old one is
   kept with ``status=superseded``, ``superseded_by`` and ``valid_to``;
3. near duplicate (cosine ≥ ``merge_threshold`` to an active fact) → merged: the
   richer (longer) text is kept, tags are united, importance is raised one step —
   unless it gives another value for a single-valued slot or negates it (then rule 4 applies:
   "Is 30 years old" and "Is 31 years old" embed alike but contradict);
4. same single-valued slot ("Lives in …", "Works as …") with another value, or the same claim
   negated ("Likes tea" / "Dislikes tea", "Is not allergic to peanuts") → supersede;
5. otherwise a new fact.
Task updates match an existing task by id, else semantically (≥ ``task_match_threshold``).
All reads and writes of one turn run in one Postgres transaction holding the user's lock
(storage.user_transaction): exactly once, whichever entry point writes.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from langgraph.store.base import PutOp
from pydantic import BaseModel, Field

from storage import forget_ledger, store_rows
from storage.memory_store import memory_store
from storage.store_lookups import items_where
from storage.user_transaction import embed_ahead, user_transaction
from core.namespaces import PROFILE_KEY, facts_ns, profile_ns, tasks_ns
from core.dates import redated_task
from core.schemas import TAGS_MAX, ExtractionResult, Fact, NewFact, Source, Task, normalize_text, text_hash, utcnow, with_source
from core.text_validation import LIST_ITEMS
from core.redaction import Redactor
from memory.kinds import KINDS
from memory.writer import run_undo
from memory.user_memory import get_user_document, parse_fact, parse_task, search_facts, search_tasks
from memory.writer.forgets import clear_fields_said_only_by
from memory.writer.merge_rules import (
    MERGE_THRESHOLD,
    TASK_DUPLICATE_THRESHOLD,
    TASK_MATCH_THRESHOLD,
    contradicts,
    names_value,
    opposes,
    other_numbers,
    preference_in_words,
    raise_importance,
    slot_of,
)
from memory.writer.stored import facts_where, tasks_with_hash, valid_stored

log = logging.getLogger(__name__)


@dataclass
class WriteReport:
    facts_added: list[str] = field(default_factory=list)
    facts_merged: list[str] = field(default_factory=list)
    facts_superseded: list[dict] = field(default_factory=list)
    duplicates_dropped: list[str] = field(default_factory=list)
    profile_changes: dict = field(default_factory=dict)
    """Each profile field given a new value, or None when the user said its value no longer holds."""
    profile_cleared: dict = field(default_factory=dict)
    """The fields cleared so, with the value each held ("location": "Rome")."""
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
            if value is None:
                parts.append(f"{key} cleared (was {self.profile_cleared.get(key)})")
            else:
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
    Written during a run's reply phase (a task tool), the writes are journaled so that taking the run
    back undoes them (memory.writer.run_undo).
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
            await run_undo.journal(tx, user_id, ops)  # a run's tool writing: undone if the run is taken back
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


def _merge_fields(section, updates: dict, list_field: str, unset: tuple, changes: dict, repeats: dict) -> bool:
    """Set the changed scalar fields of one document section and extend its list field with
    the entries not already there (compared normalized); record what changed, and what was said
    again unchanged (``repeats``); True when any field changed."""
    changed = False
    for name, value in updates.items():
        if name == list_field:
            known = {normalize_text(x) for x in getattr(section, list_field)}
            added = [v for v in value if normalize_text(v) not in known]
            if added:
                items = getattr(section, list_field)
                items.extend(added)
                del items[:-LIST_ITEMS]  # within the list's limit: the oldest give way (a goal of years ago)
                changes[list_field] = added
                changed = True
            if len(added) < len(value):
                repeats[list_field] = [v for v in value if normalize_text(v) in known]
        elif value not in unset and getattr(section, name) != value:
            setattr(section, name, value)
            changes[name] = value
            changed = True
        elif value not in unset:
            repeats[name] = value
    return changed


async def _apply_profile(tx, user_id: str, result: ExtractionResult, now: datetime, report: WriteReport, ops: list, source_of=lambda _t: None) -> None:
    """Profile and preferences: one document, changed fields only; each field said (changed or repeated) records its source."""
    doc = await get_user_document(tx, user_id)
    repeats: dict[str, dict] = {"profile": {}, "preferences": {}}
    doc_changed = _merge_fields(doc.profile, result.profile_updates.model_dump(), "goals", (None, ""), report.profile_changes, repeats["profile"])
    doc_changed = _merge_fields(doc.preferences, result.new_preferences.model_dump(), "other_notes", (None,), report.preference_changes,
                                repeats["preferences"]) or doc_changed
    sources_changed = False
    for part, changes in (("profile", report.profile_changes), ("preferences", report.preference_changes)):
        for name, value in {**repeats[part], **changes}.items():
            src = source_of(", ".join(value) if isinstance(value, list) else str(value))
            key = f"{part}.{name}"
            if name not in changes and not doc.sources.get(key):
                continue  # a value of unknown origin stays so: deleting the repeat alone must not clear it
            if src is not None:
                # A new value of a scalar field starts its history anew; a repeat or a list field's
                # entries add theirs (deleting one message that said it leaves a field another said).
                anew = name in changes and not isinstance(value, list)
                sources = with_source([] if anew else doc.sources.get(key, []), src)
                sources_changed = sources_changed or sources != doc.sources.get(key)
                doc.sources[key] = sources
    for name, said in result.retracted.items():
        stored = getattr(doc.profile, name)
        # Cleared only while it holds the value the user named ("I no longer live in Rome" leaves
        # Haifa), and not when this turn gave the field a new value ("…, I live in Milan now").
        if stored and name not in report.profile_changes and names_value(said, stored):
            setattr(doc.profile, name, None)
            doc.sources.pop(f"profile.{name}", None)  # no value, no history of where it came from
            report.profile_changes[name], report.profile_cleared[name] = None, stored
            doc_changed = True
    if doc_changed:
        doc.updated_at = now
    if doc_changed or sources_changed:
        ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))


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
    active: dict[str, Fact] = {f.id: f for f in await facts_where(tx, user_id, "hash", hashes)}
    by_slot: dict[str, list[Fact]] = {}
    for f in await facts_where(tx, user_id, "slot", slots):
        active[f.id] = f
        by_slot.setdefault(f.slot or "", []).append(f)
    for nf in new_facts:
        if nf.supersedes and nf.supersedes not in active:
            named = await valid_stored(tx, "facts", user_id, nf.supersedes)
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
            existing.mentions += _said_again(existing, source_of(nf.text))
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
            if best and best[1] >= merge_threshold and not (
                contradicts(nf.text, best[0].text) or opposes(nf.text, best[0].text) or other_numbers(nf.text, best[0].text)
            ):
                target = best[0]
                richer = len(nf.text) > len(target.text)
                if richer:
                    target.text, target.hash = nf.text, h
                target.importance = raise_importance(target.importance, nf.importance)
                target.tags = sorted(list(dict.fromkeys([*target.tags, *nf.tags]))[:TAGS_MAX])  # once each, its own first
                target.mentions += _said_again(target, source_of(nf.text))
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
            if old is None:  # the user says the opposite now ("I'm not allergic to peanuts anymore")
                old = next((f for f, _ in similar if f.id not in touched and opposes(nf.text, f.text)), None)
        if old is not None:
            old = touched.get(old.id, old)
            old.supersede(now, by=new.id)
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
            target = await valid_stored(tx, "tasks", user_id, upd.task_id)
        similar = [(staged.get(t.id, t), s) for t, s in await search_tasks(tx, user_id, upd.description, limit=3)]
        open_similar = [(t, s) for t, s in similar if t.status in ("open", "in_progress")]
        if target is None and upd.action != "add":
            if open_similar and open_similar[0][1] >= TASK_MATCH_THRESHOLD:
                target = open_similar[0][0]
        if upd.action == "add":
            same_text = [t for t, _ in await tasks_with_hash(tx, user_id, text_hash(upd.description))]
            exact = next((staged.get(t.id, t) for t in same_text if staged.get(t.id, t).status in ("open", "in_progress")), None)
            exact = exact or next((t for t in staged.values() if normalize_text(t.description) == wanted and t.status in ("open", "in_progress")), None)
            # The same words for another day are another task ("Call the dentist on Mon 7 Dec" beside
            # "… on Fri 11 Dec" embed at 0.97): never dropped as the one already on the list.
            near = open_similar[0][0] if open_similar and open_similar[0][1] >= TASK_DUPLICATE_THRESHOLD else None
            if near is not None and near.due_date and upd.due_date and near.due_date != upd.due_date:
                near = None
            if exact or near:
                # Already on the list: this message said it too (a deletion of the other keeps it).
                same = exact or near
                said = with_source(same.sources, source_of(upd.description))
                if said != same.sources:
                    same.sources, staged[same.id] = said, same
                    ops.append(PutOp(tasks_ns(user_id), same.id, same.model_dump(mode="json"), index=False))
                continue
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
            if upd.due:  # a text that said the old date says the new one (its vector, of the same task, is kept)
                redated = redated_task(target.description, target.due, target.due_date, upd.due, upd.due_date)
                target.description, target.hash = redated, text_hash(redated)
                target.due, target.due_date = upd.due, upd.due_date
            target.updated_at = now
            staged[target.id] = target
            ops.append(PutOp(tasks_ns(user_id), target.id, target.model_dump(mode="json"), index=False))
            report.tasks_updated.append(target.description)


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
    fields: list[str] = field(default_factory=list)
    """The profile fields and preferences cleared ("profile.role")."""


def _said_again(fact: Fact, source: Source | None) -> int:
    """1 when ``source`` is a message the fact did not come from yet, else 0: the same message
    extracted again (an import's exchange done again, a memory phase retried) is not a second mention."""
    if source is None or not source.message_id:
        return 1
    known = {(s.thread_id, s.message_id) for s in fact.sources} | {(fact.source_thread, fact.source_message_id)}
    return int((source.thread_id, source.message_id) not in known)


async def retract_taught_by(store, user_id: str, message_ids: list[str], *, now: datetime | None = None) -> Retraction:
    """Retract what only the given messages taught (the user edited them away, or regenerated their
    reply): facts become superseded and tasks retracted, both kept for history; a profile field or
    preference that only they said is cleared (a field keeps no earlier value to go back to).

    A fact another message repeated since (``mentions`` > 1) stays, and so does a field another
    message said too or the user typed: something still on the conversation said it.
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
            fact.supersede(now)
            ops.append(PutOp(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=False))
            done.facts.append(fact.text)
        for key, value in await items_where(tx, tasks_ns(user_id), "source_message_id", message_ids, status=None, limit=200):
            task = parse_task(user_id, key, value)
            if task is None or task.status == "retracted":
                continue
            task.status, task.updated_at = "retracted", now
            ops.append(PutOp(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=False))
            done.tasks.append(task.description)
        doc = await get_user_document(tx, user_id)
        abandoned = set(message_ids)
        done.fields = clear_fields_said_only_by(doc, lambda source: source.message_id in abandoned)
        if done.fields:
            doc.updated_at = now
            ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))
        if ops:
            await tx.abatch(ops)
    return done


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


# --------------------------------------------------------------------------- recall


async def mark_used(store, user_id: str, fact_ids: list[str], now: datetime | None = None) -> None:
    """Set ``last_used`` on the facts that went into the prompt, and nothing else.

    Only that one field is written (storage.store_rows.set_field), without the user's lock, so it
    never waits for an extraction, and a concurrent merge or supersede is never overwritten.
    """
    now = now or utcnow()
    if not fact_ids:
        return
    await store_rows.set_field(memory_store(store).pool, facts_ns(user_id), list(fact_ids), "last_used", now)
