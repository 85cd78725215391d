"""The episodic index through the HTTP API (`memory-agent serve` on the embedded Postgres): messages
carry their time, an edit takes the abandoned branch out of the index, a chat's deletion takes its
messages, and one user's words never reach another user's prompt."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from storage import episodes as episode_table
from tests.support.http_server import final, live_server_fixture, new_account, new_chat, say, stream

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess

server = live_server_fixture("episodic_http", workers=1)


def indexed_texts(database_url: str, user: str) -> list[str]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            f"SELECT content FROM {episode_table.TABLE} WHERE owner = %s ORDER BY thread_id, position", (user,)
        ).fetchall()
    return [r["content"] for r in rows]


def excerpt_tokens(events) -> int:
    done = final(events)
    assert done.name == "done", done
    return done.data["usage"]["prompt_sections"]["episodes"]


@pytest.fixture
async def account(server):
    return await new_account(server)


async def test_messages_carry_their_time_and_an_edit_takes_the_old_branch_out_of_the_index(server, account):
    user, key = account
    with server.client(key) as client:
        chat_id = new_chat(client)
        say(client, chat_id, "I live in Rome")
        say(client, chat_id, "My dog is called Rex")
        messages = client.get(f"/chats/{chat_id}").json()["messages"]
        assert all(m["sent_at"] for m in messages)
        assert messages[0]["sent_at"] <= messages[1]["sent_at"] <= messages[2]["sent_at"]
        rex = messages[2]
        assert final(stream(client, "PUT", f"/chats/{chat_id}/messages/{rex['id']}", {"text": "My dog is called Max"})).name == "done"
        texts = indexed_texts(server.database_url, user)
        assert "My dog is called Max" in texts and "My dog is called Rex" not in texts
        # The user's two messages and the first reply; the second reply only repeated memory
        # ("I know: you live in Rome"), so it is no evidence and is not indexed (issue 26).
        assert len(texts) == 3 and not any("Rome" in t and t.startswith("(offline model) I know") for t in texts)

        assert client.delete(f"/chats/{chat_id}").status_code == 200
        assert indexed_texts(server.database_url, user) == []


async def test_one_users_words_reach_only_their_own_prompts(server, account):
    _, alice_key = account
    _, bob_key = await new_account(server)
    with server.client(alice_key) as alice, server.client(bob_key) as bob:
        say(alice, new_chat(alice), "The codename of the project is Nightingale and it ships in Tiberias")
        asked_by_bob = say(bob, new_chat(bob), "What is the codename of the project that ships in Tiberias?")
        asked_by_alice = say(alice, new_chat(alice), "What is the codename of the project that ships in Tiberias?")
    assert excerpt_tokens(asked_by_bob) == 0
    assert excerpt_tokens(asked_by_alice) > 0
