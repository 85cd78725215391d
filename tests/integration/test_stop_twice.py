"""POST /chats/{id}/stop pressed twice (a double click, a second tab) while the reply is being
stopped: both answers say what happened to the reply (real Postgres, the app in-process)."""

from __future__ import annotations

import asyncio

import pytest

from storage import api_keys, chat_runs
from tests.support.http_server import TEST_MODEL, register_test_models
from tests.support.in_process_app import client_of, in_process_app


@pytest.fixture
async def app(backend, monkeypatch):
    register_test_models()  # "[slow]" streams a word every 150 ms
    monkeypatch.setenv("MEMORY_AGENT_MODEL", TEST_MODEL)
    async with in_process_app(backend) as app:
        yield app


async def test_a_stop_sent_while_another_is_stopping_the_reply_says_stopped_not_that_nothing_was_running(app, backend, user_id, monkeypatch):
    """The second stop found no row still ``running`` (the first had made it ``stopping``) and answered
    "idle: No reply is running on this chat" while the reply was still being stopped and saved."""
    key = await api_keys.create_key(backend.pool, user_id)
    async with client_of(app, key) as client:
        chat_id = (await client.post("/chats", json={})).json()["chat"]["id"]
        reply = asyncio.create_task(client.post(f"/chats/{chat_id}/messages", json={"text": "[slow] tell me about the sea and the sky"}))
        for _ in range(200):
            if (await client.get(f"/chats/{chat_id}")).json()["running"]:
                break
            await asyncio.sleep(0.05)

        request_stop, second = chat_runs.request_stop, []

        async def second_stop_arrives_meanwhile(pool, thread_id):
            run = await request_stop(pool, thread_id)
            if not second:  # the first stop has flipped the run to stopping: the second comes now
                second.append(None)
                second[0] = (await client.post(f"/chats/{chat_id}/stop")).json()
            return run

        monkeypatch.setattr(chat_runs, "request_stop", second_stop_arrives_meanwhile)
        first = (await client.post(f"/chats/{chat_id}/stop")).json()
        assert first["stopped"] is True and first["status"] == "stopped", first
        assert second[0] == first, second[0]
        streamed = await reply
        assert streamed.text.rstrip().splitlines()[-1].startswith('data: {"code": "stopped"'), streamed.text[-300:]
        assert (await client.get(f"/chats/{chat_id}")).json()["running"] is False
