"""Chat records (title and searchable summary) and the maintenance writes: re-embedding every item
(``memory-agent reindex``) and deleting every item of a user (forget-me)."""

from __future__ import annotations

import logging


from storage import store_rows
from storage.user_transaction import embed_ahead, lock_key, user_transaction
from core.namespaces import chats_ns, user_root
from core.schemas import ChatRecord
from memory.kinds import KINDS
from memory.user_memory import get_chat

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- chat records


VECTOR_LAG_MESSAGES = 6
"""How many messages a chat's vector may lag behind its text while the text's head is unchanged.

Embedding the searchable text costs ~0.4 ms of CPU per token (~100 ms at the encoder's 256), the
largest CPU item of a long chat's turn; its newest lines are each embedded in the index of what
was said anyway. So a turn's record keeps the stored vector while only those lines moved on."""


def vector_still_serves(stored: ChatRecord | None, record: ChatRecord) -> bool:
    """Whether the vector stored for ``stored`` may stand for ``record``: made from the same head
    (``vector_head``: title, opening, summary board), at most VECTOR_LAG_MESSAGES messages behind."""
    return (
        stored is not None
        and bool(stored.summary_text)
        and bool(record.vector_head)
        and stored.vector_head == record.vector_head
        and 0 <= record.message_count - stored.vector_messages < VECTOR_LAG_MESSAGES
    )


async def _put_chat(tx, user_id: str, chat: ChatRecord, *, embed: bool = True) -> None:
    # Only the summary is embedded: that is what "find the chat about X" searches. (index=False
    # leaves the stored vector as it is.)
    embed = embed and bool(chat.summary_text)
    if embed:
        chat.vector_messages = chat.message_count
    await tx.aput(chats_ns(user_id), chat.thread_id, chat.model_dump(mode="json"), index=["summary_text"] if embed else False)


async def create_chat_record(store, user_id: str, record: ChatRecord) -> ChatRecord:
    """The record of a new chat (its title before any summary)."""
    async with user_transaction(store, user_id) as tx:
        await _put_chat(tx, user_id, record)
    return record


async def delete_chat_record(store, user_id: str, thread_id: str) -> None:
    async with user_transaction(store, user_id) as tx:
        await tx.adelete(chats_ns(user_id), thread_id)


async def save_chat_record(store, user_id: str, record: ChatRecord, *, read_before: ChatRecord | None = None) -> ChatRecord:
    """Write a chat's record (title, searchable summary) under the user's lock; a title the user
    set in the meantime wins over the one computed here.

    ``read_before`` (a turn's record: the record as the caller read it): the stored vector stays
    when it still serves (:func:`vector_still_serves`). Every other write embeds the text again:
    a forget must never leave a vector of what it removed."""
    if not vector_still_serves(read_before, record):
        await embed_ahead(store, [record.summary_text])
    async with user_transaction(store, user_id) as tx:
        stored = await get_chat(tx, user_id, record.thread_id)
        if stored is not None and stored.title_by_user:
            record.title, record.title_by_user, record.title_topics = stored.title, True, stored.title_topics
        # Checked again on what the lock shows (a rename or a forget may have come in between).
        keep = read_before is not None and vector_still_serves(stored, record)
        if keep:
            record.vector_messages = stored.vector_messages
        await _put_chat(tx, user_id, record, embed=not keep)
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
    sees nothing after); a kind kept in a table of its own (``forget`` hook) reports its count
    under its name."""
    counts = {"memories": await store_rows.delete_under(pool, user_root(user_id), lock_key(user_id))}
    for kind in KINDS.values():
        if kind.forget is not None:
            counts[kind.name] = await kind.forget(pool, user_id)
    return counts
