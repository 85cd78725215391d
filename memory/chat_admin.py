"""Taking a turn back, deleting a chat, and forgetting a user everywhere.

A chat is a LangGraph thread (``thread_id`` = chat id) whose owner is the row the
server wrote in ``storage.thread_owners`` (not the record in a ``chats`` store
namespace, which only helps find the chat by topic).

Taking a turn back (a stopped or failed reply): checkpoint ids are time-ordered
(uuid6), the same order the saver lists them in, so everything a run wrote is what
is newer than the thread's head when it started: newer checkpoints, their pending
writes, writes added to the head itself (a resume answer), and blobs no remaining
checkpoint points to.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable, Sequence

from psycopg_pool import AsyncConnectionPool

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from core.redaction import Redactor, term_hashes
from memory.chat_text import redact_title
from memory.user_memory import get_chat, list_chats
from memory.writer import records as memory_records
from memory.forgetting import forget_message, redact_deleted_message, redacted_chat, redactor_for, was_folded
from storage import api_keys, chat_imports, chat_runs, episodes, forget_ledger, owner_forgets, thread_owners
from storage.memory_store import memory_store
from core.schemas import ChatRecord
from core.state import LAST_NODE

# How long forget-me or a deletion waits for a running import to stop and undo itself (it answers
# within a beat, BEAT_SECONDS, plus its clean-up); a later importer still stops at its next step.
IMPORT_STOP_SECONDS = 15.0


async def write_empty_chat(graph, thread_id: str) -> str:
    """The empty chat's checkpoint (no messages, the memory phase done): "before the first message",
    the fork point when that message is edited or its reply regenerated. Written when a chat is
    created, so its first turn is saved as every later one (``graph.assembly.reply_phase_durability``);
    a turn or an import on a thread without a checkpoint writes it first. Its checkpoint id."""
    config = await graph.aupdate_state({"configurable": {"thread_id": thread_id}}, {"messages": []}, as_node=LAST_NODE)
    return config["configurable"]["checkpoint_id"]


async def owned_ids(db, user_id: str, thread_ids: Iterable[str]) -> set[str]:
    """The ids among ``thread_ids`` the server recorded as ``user_id``'s. ``db`` is the pool or our store."""
    pool = db if isinstance(db, AsyncConnectionPool) else memory_store(db).pool
    return await thread_owners.owned_among(pool, user_id, thread_ids)


async def owned_chats(db, user_id: str, chats: Sequence[ChatRecord]) -> list[ChatRecord]:
    """Only the user's own chats: a record in their ``chats`` namespace proves nothing by itself."""
    mine = await owned_ids(db, user_id, (c.thread_id for c in chats))
    return [c for c in chats if c.thread_id in mine]


async def stop_imports(pool: AsyncConnectionPool, user_id: str, thread_id: str | None = None) -> int:
    """Forget-me and chat deletion win over an import: the user's imports (or the chat's) are asked
    to stop and undo themselves, and waited for; their rows go. How many there were."""
    rows = await chat_imports.cancel(pool, user_id, thread_id)
    await chat_imports.wait_gone(pool, [r.import_id for r in rows if r.state == "running"], IMPORT_STOP_SECONDS)
    await chat_imports.delete(pool, user_id, thread_id)
    return len(rows)


async def import_states(pool: AsyncConnectionPool, user_id: str | None, thread_ids: Iterable[str]) -> dict[str, chat_imports.ImportRow]:
    """The chats among ``thread_ids`` (of ``user_id``; None: chats already known to be the caller's)
    that are being imported or whose import is incomplete."""
    return await chat_imports.of_threads(pool, user_id, thread_ids)


async def delete_chat(backend, user_id: str, thread_id: str) -> None:
    """The thread's checkpoints (all three tables), its messages in the episodic index, its run rows,
    and last its record in the chats namespace with its owner row, in one transaction (so a failure
    half-way leaves a chat its owner can still delete, and a rename or a turn's record racing the
    deletion cannot write the record back: ``memory.writer.records``). Another user's chat is
    refused (ThreadTaken), whoever calls."""
    await thread_owners.check_not_anothers(backend.pool, thread_id, user_id)
    await backend.checkpointer.adelete_thread(thread_id)
    await episodes.delete_thread(backend.pool, user_id, thread_id)
    await chat_runs.delete_thread_runs(backend.pool, thread_id)
    await memory_records.delete_chat_record(backend.store, user_id, thread_id)
    await chat_imports.forget_takeovers(backend.pool, [thread_id])  # an importer taken over on it that comes back undoes itself


async def user_thread_ids(backend, user_id: str) -> list[str]:
    """Every thread of the user, as the server recorded it (never from the user's own store items)."""
    return await thread_owners.threads_of(backend.pool, user_id)


async def forget_user_everywhere(backend, user_id: str, *, stop_runs: Callable[[], Awaitable[object]] | None = None) -> dict[str, int]:
    """Delete everything of one user: the threads they own and their checkpoints, every store
    namespace under ``("users", user_id)`` (vectors go with their items), their messages in the
    episodic index, the record of their forgets, API keys, run rows and ownership rows.

    First, in one transaction, the user's forget generation goes up and their API keys go
    (storage.owner_forgets): from its commit no request authenticates as the user, and every request
    authenticated before is refused at its next write (a run's start, an owner row, a memory write,
    an import: OwnerForgotten). Only then are the runs that started before stopped (``stop_runs``,
    the server's: the user's replies everywhere) and imports under way stopped and undone, so
    nothing of them comes back (storage.chat_imports.forgetting_owner: the user's imports wait for
    this to end), and everything deleted."""
    with owner_forgets.no_caller():  # its own writes are no forgotten caller's
        async with backend.pool.connection() as conn, conn.transaction():
            await owner_forgets.bump(conn, user_id)
            keys = await api_keys.delete_user_keys_on(conn, user_id)
        async with chat_imports.forgetting_owner(backend.pool, user_id):
            if stop_runs is not None:
                await stop_runs()
            await stop_imports(backend.pool, user_id)
            threads = await user_thread_ids(backend, user_id)
            await chat_imports.forget_takeovers(backend.pool, threads)
            for thread_id in threads:
                await backend.checkpointer.adelete_thread(thread_id)
            forgotten = await memory_records.forget_user_memory(backend.pool, user_id)  # every kind, messages included
            # The record of what they had forgotten goes too: nothing of theirs is left to hide.
            ledger = await forget_ledger.delete_owner(backend.pool, user_id)
            keys += await api_keys.delete_user_keys(backend.pool, user_id)  # (one made meanwhile, by the CLI)
            runs = await chat_runs.delete_user_runs(backend.pool, user_id)
            await thread_owners.release_all(backend.pool, user_id)
    return {"chats": len(threads), **forgotten, "forgets": ledger, "api_keys": keys, "runs": runs}


DELETED = "[deleted]"
"""What stands in the transcript for a message the user deleted outright."""


async def delete_message_everywhere(backend, graph, user_id: str, thread_id: str, message: BaseMessage) -> bool:
    """Delete one message outright: hidden from every model and derived copy for good (the forget
    ledger), the facts and tasks only it taught deleted, its index row emptied, its text replaced in
    the transcript, the summary board rid of it if it was folded in, the state of every chat of the
    user rid of what it drew from it, the chat's earlier checkpoints (which still hold it) pruned,
    and the chat's searchable text written again. A user's message's distinctive words are hidden in
    the agent's replies too, in every chat (a reply may have quoted it): their index rows are
    rewritten, and so is the searchable text of every other chat whose text carried them. A message
    of another user's chat is refused (ThreadTaken), whoever calls. False when it was deleted
    already (a repeated DELETE reports no deletion, and runs again the steps that need no text)."""
    await thread_owners.check_not_anothers(backend.pool, thread_id, user_id)
    config = {"configurable": {"thread_id": thread_id}}
    if message.text == DELETED and (await redactor_for(backend.store, user_id)).hides(thread_id, message.id):
        # Deleted already: nothing is recorded again (its words are gone with its text), but the
        # steps that need no text run again: a retry prunes the checkpoints that still hold it and
        # writes the chat's text again (the redaction on every read hides it from the rest).
        await backend.checkpointer.aprune([thread_id], strategy="keep_latest")
        await rewrite_chat_text(backend.store, user_id, thread_id, (await graph.aget_state(config)).values)
        return False
    said = message.text if isinstance(message, HumanMessage) else ""  # a reply's words are no statement of the user
    await forget_message(backend.store, user_id, thread_id, message.id, said)
    update = {"content": DELETED, **({"tool_calls": []} if isinstance(message, AIMessage) else {})}
    await graph.aupdate_state(config, {"messages": [message.model_copy(update=update)]}, as_node=LAST_NODE)
    await redact_deleted_message(backend.store, user_id, thread_id, (await graph.aget_state(config)).values, message)
    await backend.checkpointer.aprune([thread_id], strategy="keep_latest")
    await rewrite_chat_text(backend.store, user_id, thread_id, (await graph.aget_state(config)).values, deleted=message)
    if said:
        await _rewrite_quoting_chats(backend, graph, user_id, thread_id)
    return True


async def _rewrite_quoting_chats(backend, graph, user_id: str, thread_id: str) -> None:
    """Write again the searchable text of the user's other chats whose text carries a deleted
    message's words (as the agent's replies may hold them); the text is built from the transcript,
    where only the replies lose them."""
    redactor = await redactor_for(backend.store, user_id)
    for chat in await list_chats(backend.store, user_id):
        if chat.thread_id != thread_id and redactor.carries(chat.summary_text, reply=True):
            values = (await graph.aget_state({"configurable": {"thread_id": chat.thread_id}})).values
            await rewrite_chat_text(backend.store, user_id, chat.thread_id, values)


async def rewrite_chat_text(store, user_id: str, thread_id: str, values: dict, *, deleted: BaseMessage | None = None) -> ChatRecord | None:
    """Write the chat's searchable text again from its transcript (``values``, the thread's state)
    as the user's forgets leave it, and embed it at once: what a deletion took out leaves the
    record's text and vector now, not at the chat's next turn, which may never come. The title loses
    the ``deleted`` message's words too when it could hold them (the message was the opening, or
    the board had folded it in), unless the user set it."""
    chat = await get_chat(store, user_id, thread_id)
    if chat is None:
        return None
    redacted = await redacted_chat(store, user_id, thread_id, values.get("messages", []), values.get("summary"))
    opening = redacted.opening  # (hidden messages keep their ids)
    if deleted is not None and ((opening is not None and opening.id == deleted.id) or was_folded(values, deleted.id)):
        # the opening's keyword title, or a title drawn from a board that folded it in
        redact_title(chat, Redactor(user_id, frozenset(term_hashes(user_id, [deleted.text]))), user_set_too=False)
    chat.summary_text = redacted.searchable(chat.title, values.get("summarized_through")).text
    chat.message_count = len(values.get("messages", []))
    return await memory_records.save_chat_record(store, user_id, chat)
