"""Chat records (title and searchable summary) and the maintenance writes: re-embedding every item
(``memory-agent reindex``) and deleting every item of a user (forget-me)."""

from __future__ import annotations

import logging
from typing import Sequence

import prompts
from storage import forget_ledger, store_rows, thread_owners
from storage.user_transaction import embed_ahead, lock_key, user_transaction
from core.namespaces import INDEXED_FIELDS, ROOT, chats_ns, user_root
from core.schemas import NEW_CHAT_TITLE, SUMMARY_CHARS, ChatRecord, checked_value
from core.errors import MemoryAgentError
from core.text_validation import LINE_CHARS, LIST_ITEMS, NAME_CHARS, is_blank, shortened
from memory.chat_text import redact_record, retitled_text
from memory.kinds import KINDS
from memory.user_memory import get_chat

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- chat records


VECTOR_LAG_MESSAGES = 6
"""How many messages a chat's vector may lag behind its text.

Embedding the searchable text costs ~0.4 ms of CPU per token (~100 ms at the encoder's 256), and
its newest lines change at every turn; they are each embedded in the index of what was said
anyway. So a turn's record keeps the stored vector while the text only grew."""


def vector_still_serves(stored: ChatRecord | None, record: ChatRecord, parts: Sequence[str]) -> bool:
    """Whether the vector stored for ``stored`` may stand for ``record``, whose text is made of
    ``parts`` (memory.chat_text.SearchableText): every part the vector was made from is still in
    the text unchanged (the same head; no line since edited, deleted, redacted or pushed out), so
    the vector holds nothing the text does not, and it is at most VECTOR_LAG_MESSAGES messages behind."""
    return (
        stored is not None
        and bool(stored.summary_text)
        and bool(stored.vector_parts)
        and set(stored.vector_parts) <= set(parts)
        and 0 <= record.message_count - stored.vector_messages < VECTOR_LAG_MESSAGES
    )


async def _put_chat(tx, user_id: str, chat: ChatRecord, *, kept: ChatRecord | None = None, parts: Sequence[str] = ()) -> None:
    """Write the record. ``kept``: the stored record whose vector stays (index=False leaves it as it
    is). Else the text is embedded, and ``parts`` says what it is made of: a turn knows; any other
    write does not, and its vector is never kept."""
    # The one write of a chat's record keeps its generated fields within the record's limits,
    # whoever built them (a keyword title of a 17,000-character opening was stored whole).
    chat.title = shortened(chat.title, NAME_CHARS)
    chat.title_topics = [t[:LINE_CHARS] for t in chat.title_topics[:LIST_ITEMS]]
    chat.summary_text = chat.summary_text[:SUMMARY_CHARS]  # a model's oversized summary board
    # Only the summary is embedded: that is what "find the chat about X" searches.
    if kept is not None:
        chat.vector_parts, chat.vector_messages = list(kept.vector_parts), kept.vector_messages
        index = False
    else:
        chat.vector_parts, chat.vector_messages = list(parts), chat.message_count
        index = ["summary_text"] if chat.summary_text else False
    await thread_owners.hold_owned(tx.conn, chat.thread_id, user_id)  # never a record of a chat deleted meanwhile
    await tx.aput(chats_ns(user_id), chat.thread_id, chat.model_dump(mode="json"), index=index)


class ChatRecordExists(MemoryAgentError, ValueError):
    """A new chat's record was asked for where the chat already has one (its title and summary stay)."""


async def create_chat_record(store, user_id: str, record: ChatRecord) -> ChatRecord:
    """The record of a new chat (its title before any summary). A persona no prompt file names is
    refused (ValueError: every turn of the chat would fail on it), and so is a chat that has a record
    already (ChatRecordExists: its title, summary and counts are not overwritten)."""
    if record.persona is not None and record.persona not in prompts.personas():
        raise ValueError(f"Unknown persona {record.persona!r}; choose one of: {', '.join(prompts.personas())}.")
    record.title = new_title(record.title)
    async with user_transaction(store, user_id) as tx:
        if await get_chat(tx, user_id, record.thread_id) is not None:
            raise ChatRecordExists(f"Chat {record.thread_id} has a record already.")
        # A title brought back (an import of a chat whose words were forgotten since) stays without them.
        redact_record(record, await forget_ledger.redactor_of_store(tx, user_id))
        await _put_chat(tx, user_id, record)
    return record


def new_title(title: str) -> str:
    """A chat title given as new input, checked whoever calls: trimmed, not blank, storable and
    within the record's limit (ValueError, before anything is written)."""
    title = title.strip()
    if is_blank(title):
        raise ValueError("The title is empty; give a title, or none to let the agent title the chat.")
    return checked_value(ChatRecord, "title", title)


async def delete_chat_record(store, user_id: str, thread_id: str) -> None:
    """The chat's record and its owner row, together under the user's lock: a record write (which
    holds the owner row, ``_put_chat``) then comes before both, or finds the chat gone."""
    async with user_transaction(store, user_id) as tx:
        await tx.adelete(chats_ns(user_id), thread_id)
        await thread_owners.release_on(tx.conn, thread_id)


async def save_chat_record(store, user_id: str, record: ChatRecord, *, read_before: ChatRecord | None = None, parts: Sequence[str] = ()) -> ChatRecord:
    """Write a chat's record (title, searchable summary) under the user's lock; a title the user
    set in the meantime wins over the one computed here.

    A turn's record passes the record as it read it (``read_before``) and its text's ``parts``:
    the stored vector stays when it still serves (:func:`vector_still_serves`). Every other
    write embeds the text again: a forget must never leave a vector of what it removed."""
    if not vector_still_serves(read_before, record, parts):
        await embed_ahead(store, [record.summary_text])
    async with user_transaction(store, user_id) as tx:
        stored = await get_chat(tx, user_id, record.thread_id)
        if stored is not None and stored.title_by_user:
            if record.title != stored.title:  # renamed since the turn built its text: not found by the old name
                record.summary_text = retitled_text(record.summary_text, record.title, stored.title)
            record.title, record.title_by_user, record.title_topics = stored.title, True, stored.title_topics
        # A forget that committed since the caller built the text (its rewrite of the chats may
        # have run before this write) is applied here, under the lock its ledger write took too.
        redacted = redact_record(record, await forget_ledger.redactor_of_store(tx, user_id))
        # Checked again on what the lock shows (a rename or a forget may have come in between).
        keep = read_before is not None and not redacted and vector_still_serves(stored, record, parts)
        await _put_chat(tx, user_id, record, kept=stored if keep else None, parts=parts)
    return record


async def rename_chat(store, user_id: str, fallback: ChatRecord, title: str | None) -> ChatRecord:
    """Set the chat's title for good, or (``None``) hand titling back to the agent. A blank, oversized
    or unstorable title is refused (ValueError); it is trimmed."""
    if title is not None:
        title = new_title(title)
    async with user_transaction(store, user_id) as tx:
        record = await get_chat(tx, user_id, fallback.thread_id) or fallback
        if title is None:
            record.title_by_user = False
            record.title_topics = []  # retitled at the next summary
        else:
            record.summary_text = retitled_text(record.summary_text, record.title, title)
            record.title, record.title_by_user = title, True
            redact_record(record, await forget_ledger.redactor_of_store(tx, user_id))  # no title brings a forgotten word back
        await _put_chat(tx, user_id, record)
    return record


async def retitle_from_opening(store, user_id: str, thread_id: str) -> bool:
    """The chat's opening message was edited: a title drawn from the first exchange (not the user's,
    nor one drawn from the summary's topics since) is given up, so the turn's record titles the chat
    from the new opening. Whether it was."""
    async with user_transaction(store, user_id) as tx:
        record = await get_chat(tx, user_id, thread_id)
        if record is None or record.title_by_user or record.title_topics or record.title == NEW_CHAT_TITLE:
            return False
        record.summary_text = retitled_text(record.summary_text, record.title, NEW_CHAT_TITLE)
        record.title = NEW_CHAT_TITLE
        await _put_chat(tx, user_id, record)
    return True


# --------------------------------------------------------------------------- maintenance


async def reembed_items(store, keys: list[tuple[tuple[str, ...], str]], *, batch: int = 64) -> int:
    """Put every item again, as it is now, so the store embeds it with its current model
    (``memory-agent reindex``); the profile is never embedded. How many were put.

    ``keys`` were listed before (``storage.store_rows.all_keys``), and the app may serve meanwhile:
    each user's items are read and put under the user's lock, so an item a forget deleted or
    changed since the list was read is not brought back as it was."""
    by_owner: dict[str | None, list[tuple[tuple[str, ...], str]]] = {}
    for namespace, key in keys:
        owner = namespace[1] if len(namespace) > 1 and namespace[0] == ROOT else None
        by_owner.setdefault(owner, []).append((namespace, key))
    put = 0
    for owner, owned in by_owner.items():
        for start in range(0, len(owned), batch):
            put += await _put_again(store, owner, owned[start : start + batch])
    return put


async def _put_again(store, owner: str | None, keys: list[tuple[tuple[str, ...], str]]) -> int:
    if owner is None:  # no user's item (none is written today): nobody's lock to take
        return await _put_current(store, keys)
    async with user_transaction(store, owner) as tx:
        return await _put_current(tx, keys)


async def _put_current(tx, keys: list[tuple[tuple[str, ...], str]]) -> int:
    """Each item as it is now, embedded in one batch: what a forget removed since the list was read
    is neither put back nor sent to the embeddings."""
    current = [(namespace, key, item.value) for namespace, key in keys if (item := await tx.aget(namespace, key)) is not None]
    await embed_ahead(tx, [str(v.get(f) or "") for ns, _, v in current if ns[-1] != "profile" and isinstance(v, dict) for f in INDEXED_FIELDS])
    for namespace, key, value in current:
        if namespace[-1] == "chats" and isinstance(value, dict):
            value = {**value, "vector_parts": []}  # made from the whole text now, parts unknown: never kept
        await tx.aput(namespace, key, value, index=None if namespace[-1] != "profile" else False)
    return len(current)


async def forget_user_memory(pool, user_id: str) -> dict[str, int]:
    """Delete every item of the user, every kind: ``{"memories": store items, <kind>: rows}``.

    The store's items go under the user's lock (an extraction running now commits before, or
    sees nothing after); a kind kept in a table of its own (``forget`` hook) reports its count
    under its name."""
    counts = {"memories": await store_rows.delete_under(pool, user_root(user_id), lock_key(user_id))}
    for kind in KINDS.values():
        if kind.forget is not None:
            counts[kind.name] = await kind.forget(pool, user_id)
    return counts
