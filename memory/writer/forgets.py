"""The store half of a forget (memory.forgetting does the derived copies after it): in one transaction
holding the user's lock, the forget is recorded (storage.forget_ledger) and every fact, task, profile
field and preference that carries its words, or came only from its messages, goes."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

from langgraph.store.base import PutOp

from storage import episode_rewrites, forget_ledger, thread_owners
from storage.memory_store import memory_store
from storage.user_transaction import user_transaction
from core.namespaces import PROFILE_KEY, facts_ns, profile_ns, tasks_ns
from core.schemas import Fact, Source, UserDocument, utcnow
from core.redaction import Redactor, distinctive_stems, term_hashes
from memory.user_memory import _all as all_items
from memory.kinds import KINDS
from memory.user_memory import get_user_document, invalid_items, parse_item
from memory.writer.merge_rules import preference_in_words
from memory.writer.stored import valid_stored

log = logging.getLogger(__name__)


@dataclass
class ForgetWrite:
    """What the store half of a forget did, and what the derived copies' half needs from it."""

    forget_id: str = ""
    forgotten: list[str] = field(default_factory=list)
    """The items as the user knew them ("Works as a nurse", "role: nurse")."""
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
    pool = memory_store(store).pool
    out = ForgetWrite()
    texts: list[str] = [words] if words.strip() and distinctive_stems(words) else []
    refs: list[tuple[str, str]] = []
    async with user_transaction(store, user_id) as tx:
        doc = await get_user_document(tx, user_id)
        cleared: set[str] = set()
        for part, key in targets:
            if part in ("facts", "tasks"):
                parsed = await valid_stored(tx, part, user_id, key)
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
        # A source message that does not carry the words themselves is hidden whole. One that is gone
        # with its chat (deleted; DELETE /chats keeps what it taught) is not: nothing of it is left to
        # hide, and hidden it took every other item only it had taught with the one forgotten.
        probe = Redactor(user_id, frozenset(hashes))
        indexed: set[tuple[str, str]] = set()
        carried: set[tuple[str, str]] = set()
        if refs:
            async for page in episode_rewrites.pages_with_words(pool, user_id, [], refs):
                for said in page:
                    indexed.add((said.thread_id, said.message_id))
                    if probe.carries(said.content):
                        carried.add((said.thread_id, said.message_id))
        gone = await thread_owners.gone_among(pool, (t for t, m in refs if (t, m) not in indexed))
        hidden = [r for r in refs if r not in carried and r[0] not in gone]
        kind = ",".join(sorted({p for p, _ in targets})) or "words"
        out.forget_id = await forget_ledger.record(tx.conn, user_id, kind, hashes, hidden)
        out.redactor = await forget_ledger.redactor(tx.conn, user_id)
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
    """Deletes of the facts (superseded history included) and tasks for which ``goes(item, text)``, and
    of any item stored invalid (a fact, a task, the profile, a chat's record) whose value carries a
    forgotten word (no reader but the list of invalid items sees them, and it shows their value)."""
    ops: list[PutOp] = []
    for part, ns in (("facts", facts_ns(user_id)), ("tasks", tasks_ns(user_id))):
        for item in await all_items(tx, ns):
            parsed = parse_item(part, item)
            if parsed is None and out.redactor.carries(json.dumps(item.value, ensure_ascii=False)):
                ops.append(PutOp(ns, item.key, None))
                setattr(out, part, getattr(out, part) + 1)
            elif parsed is not None and goes(parsed, parsed.text if isinstance(parsed, Fact) else parsed.description):
                ops.append(PutOp(ns, parsed.id, None))
                setattr(out, part, getattr(out, part) + 1)
    for bad in await invalid_items(tx, user_id, ("profile", "chats")):  # unreadable, so read by no one but that list
        if out.redactor.carries(json.dumps(bad.value, ensure_ascii=False)):
            ops.insert(0, PutOp(KINDS[bad.kind].namespace(user_id), bad.key, None))  # first: a profile put after it stands
            log.info("forget: deleted the invalid %s item %r, which carried the forgotten words", bad.kind, bad.key)
    return ops


async def forget_message_items(store, user_id: str, thread_id: str, message_id: str, text: str = "") -> ForgetWrite:
    """Hide one message whole (the user deleted it outright), and the words of its ``text`` (the user's
    message) in the agent's replies: recorded, and the facts, tasks, profile fields and preferences
    that only hidden messages taught (this one, and any hidden before) deleted."""
    out = ForgetWrite(forgotten=[f"message {message_id}"], refs=[(thread_id, message_id)], texts=[text] if text.strip() else [])
    async with user_transaction(store, user_id) as tx:
        out.forget_id = await forget_ledger.hide_message(tx.conn, user_id, thread_id, message_id, text)
        # The whole ledger: a field two messages taught goes when the second of them is deleted.
        out.redactor = await forget_ledger.redactor(tx.conn, user_id)

        def only_from_hidden(item, _text) -> bool:
            refs = _refs(item.sources, (item.source_thread, item.source_message_id))
            return bool(refs) and all(out.redactor.hides(t, m) for t, m in refs)

        ops = await _forget_carriers(tx, user_id, out, only_from_hidden)
        doc = await get_user_document(tx, user_id)
        if _forget_fields(doc, out.redactor, set(), out):
            doc.updated_at = utcnow()
            ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))
        if ops:
            await tx.abatch(ops)
    return out


def _forget_fields(doc: UserDocument, redactor: Redactor, cleared: set[str], report: "ForgetWrite") -> bool:
    """Clear the named fields, every field whose value carries the forgotten words, and every field
    that only hidden messages taught (each of its sources is one; one typed by the user keeps it)."""
    changed = False
    for part in ("profile", "preferences"):
        section = getattr(doc, part)
        for name in type(section).model_fields:
            value = getattr(section, name)
            key = f"{part}.{name}"
            sources = doc.sources.get(key, [])
            whole = key in cleared or (bool(sources) and all(redactor.hides(s.thread_id, s.message_id) for s in sources))
            if isinstance(value, list):
                kept = [v for v in value if not redactor.carries(v)]
                if whole:
                    kept = []
                if kept != value:
                    setattr(section, name, kept)
                    changed = True
                    report.fields.append(key)
                    doc.sources.pop(key, None)
            elif value is not None and (whole or any(redactor.carries(t) for t in value_texts(part, name, value))):
                setattr(section, name, None)
                changed = True
                report.fields.append(key)
                doc.sources.pop(key, None)
    return changed


def clear_fields_said_only_by(doc: UserDocument, said_by) -> list[str]:
    """Clear each profile field and preference every source of which ``said_by(source)`` is true of
    (a field keeps no earlier value to go back to; one the user typed has a source no message is);
    the fields cleared ("profile.role")."""
    cleared = []
    for key, sources in list(doc.sources.items()):
        if not sources or not all(said_by(s) for s in sources):
            continue
        part, name = key.split(".", 1)
        section = getattr(doc, part)
        if getattr(section, name) not in (None, [], ""):
            setattr(section, name, [] if isinstance(getattr(section, name), list) else None)
            cleared.append(key)
        doc.sources.pop(key)
    return cleared


async def delete_taught_only_by_chat(store, user_id: str, thread_id: str, *, message_ids: set[str] | None = None) -> ForgetWrite:
    """Delete the facts and tasks (history included) that only messages of ``thread_id`` taught, and
    clear the profile fields and preferences every source of which is one: an import cancelled part-way
    keeps nothing of what it had learned (what another chat, or the user's typing, also said stays).
    ``message_ids``: only these messages of it (an extension's new ones; what the chat taught before stays)."""
    out = ForgetWrite(forgotten=[f"chat {thread_id}"])
    async with user_transaction(store, user_id) as tx:

        def only_from_it(item, _text) -> bool:
            refs = _refs(item.sources, (item.source_thread, item.source_message_id))
            return bool(refs) and all(t == thread_id and (message_ids is None or m in message_ids) for t, m in refs)

        ops = await _forget_carriers(tx, user_id, out, only_from_it)
        doc = await get_user_document(tx, user_id)
        out.fields += clear_fields_said_only_by(
            doc, lambda source: source.thread_id == thread_id and bool(source.message_id) and (message_ids is None or source.message_id in message_ids)
        )
        if out.fields:
            doc.updated_at = utcnow()
            ops.append(PutOp(profile_ns(user_id), PROFILE_KEY, doc.model_dump(mode="json"), index=False))
        if ops:
            await tx.abatch(ops)
    return out
