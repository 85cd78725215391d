"""What a deleted chat taught stays in memory (DELETE /chats/{id} deletes the chat, not the memory),
and each item of it is then forgotten on its own: through the chat API, on a real Postgres."""

from __future__ import annotations

import pytest

from storage import api_keys
from tests.support.in_process_app import client_of, in_process_app


@pytest.fixture
async def app(backend):
    async with in_process_app(backend) as app:
        yield app


@pytest.mark.parametrize("how", ["delete_fact", "forget_words"])
async def test_forgetting_one_thing_a_deleted_chat_taught_keeps_what_else_its_message_taught(app, backend, user_id, how):
    """A source message no longer in the index was taken for one that does not carry the forgotten
    words, and hidden whole: every other fact and field only it had taught ("Lives in Porto", the
    location) went with the one forgotten, once its chat was deleted."""
    key = await api_keys.create_key(backend.pool, user_id)
    async with client_of(app, key) as client:
        created = await client.post("/chats", json={"messages": ["I work as a nurse in Porto."]})
        assert created.status_code == 201, created.text
        facts = {f["text"]: f["id"] for f in (await client.get("/memory/facts")).json()["facts"]}
        assert set(facts) == {"Works as a nurse", "Lives in Porto"}, facts
        assert (await client.delete(f"/chats/{created.json()['chat']['id']}")).status_code == 200

        if how == "delete_fact":
            forgot = await client.delete(f"/memory/facts/{facts['Works as a nurse']}")
        else:
            forgot = await client.post("/memory/forget", json={"text": "that I work as a nurse"})
        assert forgot.status_code == 200, forgot.text

        assert [f["text"] for f in (await client.get("/memory/facts")).json()["facts"]] == ["Lives in Porto"]
        profile = (await client.get("/memory/profile")).json()
        assert profile["location"] == "Porto" and profile["role"] is None, profile
        assert [r["messages_hidden"] for r in (await client.get("/memory/forgotten")).json()["forgotten"]] == [0]
