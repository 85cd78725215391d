"""Edits by the user and by store-API clients: profile, preferences, a fact or task corrected or
deleted, a client's put or delete, an invalid item removed. Each runs under the user's lock, as
extraction does; what the user types themselves lifts the forgets of its words."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from storage import forget_ledger
from storage.user_transaction import embed_ahead, user_transaction
from core.namespaces import PROFILE_KEY, facts_ns, profile_ns, tasks_ns
from core.dates import date_languages, redated_task, resolve_date
from core.schemas import Fact, Importance, Preferences, Profile, Source, Task, checked_value, set_checked, text_hash, utcnow, with_source
from core.errors import MemoryAgentError
from core.text_validation import NEW_VALUES, is_blank
from memory.kinds import KINDS, MemoryKind
from memory.user_memory import get_user_document, invalid_item
from memory.writer.merge_rules import slot_of
from memory.writer.stored import facts_where, tasks_with_hash, valid_stored

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- edits by the user
# The memory API and the CLI change memory through these, under the same lock as extraction.


# The fields each edit may change: anything else is refused, whoever calls.
FACT_EDITS = ("text", "importance", "tags")
TASK_EDITS = ("description", "status", "due")


def _checked(model_type, changes: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    """``changes`` validated as new input against ``model_type``'s fields, before anything is embedded
    or written (ValueError naming the field when one fails or is not an edit's to change)."""
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValueError(f"{model_type.__name__} fields that cannot be edited: {', '.join(unknown)} (only {', '.join(allowed)}).")
    return {name: checked_value(model_type, name, value) for name, value in changes.items()}


async def edit_user_document(store, user_id: str, part: str, changes: dict[str, Any] | None) -> Profile | Preferences:
    """Set the given fields of the profile or the preferences (a null clears one); ``None`` resets the part."""
    if part not in ("profile", "preferences"):
        raise ValueError(f"The user document's parts are profile and preferences, not {part!r}.")
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
                set_checked(target, name, value)  # a blank value is refused, never stored
                doc.sources[f"{part}.{name}"] = [Source(by="user", said_at=now)] if value not in (None, [], "") else []
                await _lift_forgets(tx, user_id, value)
        doc.updated_at = now
        await tx.aput(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False)
    return getattr(doc, part)


async def edit_fact(
    store, user_id: str, fact_id: str, *, text: str | None = None, importance: Importance | None = None, tags: list[str] | None = None
) -> Fact | None:
    """Correct a stored fact (None when there is no valid fact with that id). A new text is re-embedded.
    Each value is checked as new input, whoever calls: a blank or oversized text, an unknown importance,
    too many or too long tags are refused (ValueError) before anything is written."""
    if text is not None and is_blank(text):
        raise ValueError("A fact's text cannot be blank.")
    changes: dict[str, Any] = {}
    if text is not None:
        changes["text"] = text.strip()
    if importance is not None:
        changes["importance"] = importance
    if tags is not None:  # each tag once, trimmed, then held to the tags' limits
        changes["tags"] = sorted({str(t).strip() for t in tags if str(t).strip()}) if isinstance(tags, list) else tags
    changes = _checked(Fact, changes, FACT_EDITS)
    text = changes.get("text")
    if text is not None:
        await embed_ahead(store, [text])
    async with user_transaction(store, user_id) as tx:
        fact = await valid_stored(tx, "facts", user_id, fact_id)
        if fact is None:
            return None
        if all(getattr(fact, name) == value for name, value in changes.items()):
            return fact  # nothing changes (an empty PATCH moved updated_at, and with it the fact's rank)
        now = utcnow()
        if text is not None:
            fact.text = text
            fact.hash, fact.slot = text_hash(text), slot_of(text)
            fact.sources = with_source(fact.sources, Source(by="user", said_at=now))
            await _lift_forgets(tx, user_id, text)
            # Another active fact saying the same now goes into this one, as a fact said again does:
            # the edit left two identical facts, both shown to the model.
            for same in await facts_where(tx, user_id, "hash", [fact.hash]):
                if same.id != fact.id and same.status == "active":
                    for source in same.sources:
                        fact.sources = with_source(fact.sources, source)
                    fact.mentions += same.mentions
                    same.supersede(now, by=fact.id)
                    await tx.aput(facts_ns(user_id), same.id, same.model_dump(mode="json"), index=False)
        if "importance" in changes:
            fact.importance = changes["importance"]
        if "tags" in changes:
            fact.tags = changes["tags"]
        fact.updated_at = now
        await tx.aput(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), index=None if text is not None else False)
    return fact


async def edit_task(store, user_id: str, task_id: str, changes: dict[str, Any]) -> Task | None:
    """Change a task's description, status or due date (None when there is no valid task with that id,
    or only a retracted one).
    Each value is checked as new input, whoever calls: a blank or oversized description or due date, an
    unknown status or field is refused (ValueError) before anything is written; a due date of None
    clears it."""
    if changes.get("description") is not None and is_blank(changes["description"]):
        raise ValueError("A task's description cannot be blank.")
    if isinstance(changes.get("description"), str):
        changes = {**changes, "description": changes["description"].strip()}
    # A None description or status changes nothing; a None due clears it (checked: it may be None).
    changes = _checked(Task, {k: v for k, v in changes.items() if not (v is None and k in ("description", "status"))}, TASK_EDITS)
    description = changes.get("description") or ""
    if description:
        await embed_ahead(store, [description])
    async with user_transaction(store, user_id) as tx:
        task = await valid_stored(tx, "tasks", user_id, task_id)
        if task is None or task.status == "retracted":  # taken back with an edited-away message: listed nowhere, not edited back
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
            old_due, old_due_date = task.due, task.due_date
            task.due = changes["due"]  # checked above: a blank due date is refused; None clears it
            task.due_date = resolve_date(changes["due"], now, date_languages(changes["due"] or ""))
            if not description:  # the text said the old date ("Call the dentist on Fri 4 Dec 2026"): it says the new one
                redated = redated_task(task.description, old_due, old_due_date, task.due, task.due_date)
                if redated != task.description:
                    description = redated
                    await embed_ahead(store, [description])
                    task.description, task.hash = description, text_hash(description)
        task.updated_at = now
        await tx.aput(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=None if description else False)
    return task


async def delete_item(store, user_id: str, kind: str, item_id: str) -> bool:
    """Delete one fact or task by id, valid or not; False when there is none. Other kinds have their
    own deletions (a chat's record goes with its chat: memory.chat_admin.delete_chat): ValueError."""
    if kind not in ("facts", "tasks"):
        raise ValueError(f"delete_item deletes facts or tasks, not {kind!r}.")
    namespace = KINDS[kind].namespace(user_id)
    async with user_transaction(store, user_id) as tx:
        if await tx.aget(namespace, item_id) is None:
            return False
        await tx.adelete(namespace, item_id)
    return True


async def delete_invalid(store, user_id: str, kind: str, key: str) -> bool:
    """Delete one stored item that does not validate (ItemIsValid when it does); False when absent."""
    async with user_transaction(store, user_id) as tx:
        item = await invalid_item(tx, user_id, kind, key)
        if item is None:
            return False
        await tx.adelete(item.namespace, key)
        return True


# --------------------------------------------------------------------------- the store API's writes


async def _lift_forgets(tx, user_id: str, value: Any) -> None:
    """What the user types into their memory themselves is theirs again: the forgets of its words end."""
    texts = [str(v) for v in value] if isinstance(value, list) else [str(value)] if isinstance(value, str) else []
    if texts:
        await forget_ledger.lift_of_store(tx, user_id, texts)


class InvalidClientItem(MemoryAgentError, ValueError):
    """A client's item does not match its kind's model and bounds (HTTP 422)."""


def _reasons(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:5])


def checked_client_item(kind: MemoryKind, key: Any, value: Any) -> BaseModel:
    """A client's item validated as new input against its kind's model, every bound applying (no NUL,
    lengths, list sizes), stored under its own id, its searched text not empty; InvalidClientItem."""
    if not isinstance(value, dict):
        raise InvalidClientItem(f"A {kind.name} item is a JSON object, not {type(value).__name__}.")
    try:
        item = kind.model.model_validate(value, context=NEW_VALUES)
    except ValidationError as exc:
        raise InvalidClientItem(f"Not a valid {kind.name} item: {_reasons(exc)}.") from exc
    if kind.key_of(item) != key:
        where = f"its {kind.id_field}" if kind.id_field else f"the key {kind.fixed_key!r}"
        raise InvalidClientItem(f"A {kind.name} item is stored under {where}: key {str(key)[:200]!r} differs.")
    for name in kind.embedded:
        text = getattr(item, name, "")
        if isinstance(text, str) and not text.strip():
            raise InvalidClientItem(f"{name} is empty.")
    return item


class ForgottenItem(MemoryAgentError, ValueError):
    """A client wrote what the user had the agent forget."""


async def put_client_item(store, user_id: str, kind: str, key: str, value: dict[str, Any]) -> str:
    """Write an item a client put through the LangGraph store API under the same rules as extraction,
    checked here against its kind's model and bounds whoever calls (InvalidClientItem): a fact whose
    text an active fact already has, or a task whose description an open task already has, adds
    nothing (the fact's ``mentions`` go up). Returns the key the item now lives under."""
    spec: MemoryKind = KINDS[kind]
    item = checked_client_item(spec, key, value)
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
            same = [f for f in await facts_where(tx, user_id, "hash", [item.hash]) if f.id != key]
            if same:
                same[0].mentions += 1
                same[0].updated_at = utcnow()
                await tx.aput(facts_ns(user_id), same[0].id, same[0].model_dump(mode="json"), index=False)
                return same[0].id
        if isinstance(item, Task) and item.status in ("open", "in_progress"):
            same_tasks = [t for t, _ in await tasks_with_hash(tx, user_id, item.hash) if t.id != key and t.status in ("open", "in_progress")]
            if same_tasks:
                return same_tasks[0].id
        await tx.aput(spec.namespace(user_id), key, item.model_dump(mode="json"), index=spec.index)
    return key


async def delete_client_item(store, user_id: str, namespace: tuple[str, ...], key: str) -> None:
    """Delete one item a client named through the LangGraph store API, under the user's lock."""
    async with user_transaction(store, user_id) as tx:
        await tx.adelete(namespace, key)
