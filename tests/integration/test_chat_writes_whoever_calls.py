"""The chat writes hold their own rules, whoever calls them: another user's chat is refused, a
title or persona is checked as new input, a record is never overwritten by a "new" one, an import
is checked even when its caller says it checked it. Each was found open to a direct Python caller
(the HTTP routes checked first) by a review of the write entry points (stop 63)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from langchain_core.messages import HumanMessage

from core.context import Context
from core.schemas import ChatRecord
from graph.assembly import compile_graph
from memory.chat_admin import delete_chat, delete_message_everywhere, write_empty_chat
from memory.chat_import import ChatImport, InvalidImport
from memory.import_job import import_chat
from memory.user_memory import get_chat, list_chats
from memory.writer.edits import delete_item, edit_user_document
from memory.writer.records import ChatRecordExists, create_chat_record, rename_chat, save_chat_record
from storage import thread_owners
from storage.thread_owners import ThreadTaken


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


async def a_chat_with_a_message(backend, graph, owner: str) -> tuple[ChatRecord, HumanMessage]:
    chat = ChatRecord(thread_id=str(uuid.uuid4()), title="Garden", title_by_user=True, persona="assistant")
    await thread_owners.create(backend.pool, chat.thread_id, owner)
    await create_chat_record(backend.store, owner, chat)
    await write_empty_chat(graph, chat.thread_id)
    said = HumanMessage("My dog is Rex", id=str(uuid.uuid4()))
    await graph.aupdate_state({"configurable": {"thread_id": chat.thread_id}}, {"messages": [said]}, as_node="reply")
    return chat, said


async def test_another_users_chat_or_message_cannot_be_deleted_through_the_memory_layer(backend, graph, user_id):
    """delete_chat(backend, "mallory", <victim's chat>) deleted the victim's history and owner row,
    and delete_message_everywhere made the victim's message "[deleted]": only the route checked."""
    chat, said = await a_chat_with_a_message(backend, graph, user_id)
    mallory = f"m{uuid.uuid4().hex[:12]}"
    with pytest.raises(ThreadTaken):
        await delete_message_everywhere(backend, graph, mallory, chat.thread_id, said)
    with pytest.raises(ThreadTaken):
        await delete_chat(backend, mallory, chat.thread_id)
    state = await graph.aget_state({"configurable": {"thread_id": chat.thread_id}})
    assert [m.text for m in state.values["messages"]] == ["My dog is Rex"]
    assert await thread_owners.owner_of(backend.pool, chat.thread_id) == user_id
    await delete_chat(backend, user_id, chat.thread_id)  # the owner can
    assert await thread_owners.owner_of(backend.pool, chat.thread_id) is None and await list_chats(backend.store, user_id) == []


@pytest.mark.parametrize("title", ["   ", "\u200b\u200b", "x" * 5000, "Gar\x00den"], ids=["blank", "invisible", "oversized", "nul"])
async def test_a_title_set_directly_is_checked_as_the_api_checks_it(backend, graph, user_id, title):
    """A blank title was stored as the user's (and so never replaced), a 5,000-character one cut
    silently, a NUL raised the database's own error."""
    chat, _ = await a_chat_with_a_message(backend, graph, user_id)
    with pytest.raises(ValueError):
        await rename_chat(backend.store, user_id, chat, title)
    with pytest.raises(ValueError):
        await create_chat_record(backend.store, user_id, ChatRecord(thread_id=str(uuid.uuid4())).model_copy(update={"title": title}))
    assert (await get_chat(backend.store, user_id, chat.thread_id)).title == "Garden"
    assert (await rename_chat(backend.store, user_id, chat, "  Trip to Porto ")).title == "Trip to Porto"


async def test_a_new_chat_record_never_overwrites_one_and_names_a_known_persona(backend, graph, user_id):
    """create_chat_record on a chat with a record replaced its title, summary and counts with a new
    chat's; a persona no prompt names was stored, and every later turn of the chat raised."""
    chat, _ = await a_chat_with_a_message(backend, graph, user_id)
    with pytest.raises(ChatRecordExists):
        await create_chat_record(backend.store, user_id, ChatRecord(thread_id=chat.thread_id))
    assert (await get_chat(backend.store, user_id, chat.thread_id)).title == "Garden"
    with pytest.raises(ValueError, match="Unknown persona"):
        await create_chat_record(backend.store, user_id, ChatRecord(thread_id=str(uuid.uuid4()), persona="no-such-persona"))
    assert len(await list_chats(backend.store, user_id)) == 1


async def test_an_import_is_checked_whatever_its_caller_says(backend, graph, user_id):
    """import_chat(..., digest=...) skipped every message check: a blank message, one holding a NUL
    and times that went back were imported. It now checks every import itself. (One over the limit
    is imported in parts now: test_chat_import.py.)"""
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    bad = [
        [("user", "   "), ("assistant", "ok")],
        [("user", "A\x00B"), ("assistant", "ok")],
        [("user", "later"), ("assistant", "earlier")],
    ]
    for i, turns in enumerate(bad):
        times = [t0 + timedelta(days=3), t0] if i == 2 else [t0, t0 + timedelta(minutes=1)]
        chat = ChatImport.model_validate({"messages": [{"role": r, "text": x, "time": t.isoformat()} for (r, x), t in zip(turns, times)]})
        with pytest.raises(InvalidImport):
            await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))
        with pytest.raises(TypeError):  # no way around the checks
            await import_chat(graph, backend.pool, user_id, chat, digest="checked", context=Context(user_id=user_id, model="offline"))
    good = ChatImport.model_validate({"messages": [{"role": "user", "text": "hi", "time": t0.isoformat()}]})
    with pytest.raises(ValueError, match="Unknown persona"):  # refused before the import's rows, not after
        await import_chat(graph, backend.pool, user_id, good, context=Context(user_id=user_id, model="offline", persona="no-such-persona"))
    assert await thread_owners.threads_of(backend.pool, user_id) == []


async def test_the_memory_edits_name_what_they_change(backend, user_id):
    """delete_item deleted a chat's record (its history stayed, unlisted); edit_user_document of an
    unknown part raised AttributeError."""
    chat = ChatRecord(thread_id=str(uuid.uuid4()))
    await thread_owners.create(backend.pool, chat.thread_id, user_id)
    await create_chat_record(backend.store, user_id, chat)
    with pytest.raises(ValueError, match="facts or tasks"):
        await delete_item(backend.store, user_id, "chats", chat.thread_id)
    assert await get_chat(backend.store, user_id, chat.thread_id) is not None
    with pytest.raises(ValueError, match="profile and preferences"):
        await edit_user_document(backend.store, user_id, "sources", {"x": "y"})


async def test_a_rename_or_a_turns_record_landing_after_the_chat_was_deleted_brings_nothing_back(backend, graph, user_id):
    """A rename checks the chat is the caller's, then writes its record: a DELETE /chats/{id} in
    between left the title and summary written back (no owner row, unlisted) after the chat was
    gone. The record's write now holds the chat's owner row, which the deletion removes with the
    record in one transaction."""
    chat, _ = await a_chat_with_a_message(backend, graph, user_id)
    seen = await get_chat(backend.store, user_id, chat.thread_id)  # what the rename's check read
    await delete_chat(backend, user_id, chat.thread_id)
    with pytest.raises(thread_owners.ChatGone):
        await rename_chat(backend.store, user_id, seen, "My secret garden")
    with pytest.raises(thread_owners.ChatGone):
        await save_chat_record(backend.store, user_id, seen.model_copy(update={"summary_text": "Rex the dog"}))
    assert await get_chat(backend.store, user_id, chat.thread_id) is None
    assert await list_chats(backend.store, user_id) == []
    assert await thread_owners.owner_of(backend.pool, chat.thread_id) is None
