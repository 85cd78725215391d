"""``DELETE /chats/{id}`` wins over an import that begins on the chat while the deletion runs
(real Postgres, offline model, the app in process). The deletion stops the chat's imports, then
claims the chat; an import beginning between the two (a resume, or a grown conversation's new
messages) is stopped in turn, not answered with 409. The interleaving is made deterministic by
beginning the import at the exact point: right after the deletion's first stop."""

from __future__ import annotations

import asyncio

import pytest

from app.http import routes_chats
from core.context import Context
from graph.assembly import compile_graph
from memory.chat_import import parse_import
from memory.import_job import import_chat
from storage import api_keys, chat_imports, thread_owners
from storage.fenced_saver import FencedPostgresSaver
from tests.support.in_process_app import client_of, in_process_app


def history(n: int):
    [chat] = parse_import({"title": "Trails", "source_id": "trails-1", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "text": f"Trail {i} was muddy." if i % 2 == 0 else f"Which trail, {i}?",
         "time": f"2024-01-01T00:{i:02d}:00Z"} for i in range(n)
    ]})
    return chat


@pytest.mark.slow
async def test_deleting_a_chat_stops_an_import_that_began_on_it_while_the_deletion_ran(backend, user_id, monkeypatch):
    key = await api_keys.create_key(backend.pool, user_id)
    context = Context(user_id=user_id, model="offline")
    graph = compile_graph(FencedPostgresSaver(backend.pool), backend.store)
    chat = await import_chat(graph, backend.pool, user_id, history(2), context=context)
    real_stop = routes_chats.stop_imports
    extension: list[asyncio.Task] = []

    async def stop_then_a_grown_import_begins(pool, user, thread_id=None):
        stopped = await real_stop(pool, user, thread_id)
        if not extension:  # the conversation's newer export arrives just after the first stop
            extension.append(asyncio.create_task(import_chat(graph, backend.pool, user_id, history(40), context=context)))
            while not await chat_imports.of_threads(backend.pool, user_id, [chat.chat_id]):
                await asyncio.sleep(0.01)
        return stopped

    monkeypatch.setattr(routes_chats, "stop_imports", stop_then_a_grown_import_begins)
    async with in_process_app(backend) as app, client_of(app, key) as client:
        response = await client.delete(f"/chats/{chat.chat_id}")

    assert response.status_code == 200, response.text
    await asyncio.gather(*extension, return_exceptions=True)
    assert await thread_owners.threads_of(backend.pool, user_id) == []
    assert await chat_imports.of_threads(backend.pool, user_id, [chat.chat_id]) == {}
    assert (await graph.aget_state({"configurable": {"thread_id": chat.chat_id}})).values.get("messages", []) == []
