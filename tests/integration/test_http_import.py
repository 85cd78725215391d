"""POST /chats/import on a live server (`memory-agent serve`, real Postgres, offline model):
the new chat is the caller's, bad input is a 422 that creates nothing, the route has its own body limit."""

from __future__ import annotations

import pytest

from tests.support.http_server import live_server_fixture, new_account
from tests.support.locomo_sample import locomo_sample

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess

server = live_server_fixture("httpimport")

HISTORY = {
    "title": "Moving to Lisbon",
    "messages": [
        {"role": "user", "text": "I am moving to Lisbon in March.", "time": "2024-01-05T09:00:00Z"},
        {"role": "assistant", "text": "Exciting! Do you need help with the paperwork?", "time": "2024-01-05T09:00:20Z"},
    ],
}


@pytest.fixture
async def owner(server):
    return await new_account(server)


@pytest.fixture
async def stranger(server):
    return await new_account(server)


def test_an_imported_history_becomes_a_chat_of_the_caller_that_no_one_else_can_read(server, owner, stranger):
    with server.client(owner[1]) as client, server.client(stranger[1]) as other:
        response = client.post("/chats/import", json=HISTORY)
        assert response.status_code == 201, response.text
        chat = response.json()
        assert chat["chat"]["title"] == "Moving to Lisbon" and chat["chat"]["title_set_by_user"]
        assert [m["content"] for m in chat["messages"]] == [m["text"] for m in HISTORY["messages"]]
        chat_id = chat["chat"]["id"]
        assert [c["id"] for c in client.get("/chats").json()["chats"]] == [chat_id]
        assert other.get(f"/chats/{chat_id}").status_code == 403
        assert other.get("/chats").json()["chats"] == []

        locomo = client.post("/chats/import", json=locomo_sample())
        assert locomo.status_code == 201, locomo.text
        assert locomo.json()["messages"][0]["content"].startswith("Caroline: Hey Mel!")


def test_a_bad_history_is_422_naming_the_message_and_creates_no_chat(server, owner):
    bad = {"messages": [HISTORY["messages"][0], {**HISTORY["messages"][1], "text": " "}]}
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=bad)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "invalid_import" and "messages.1" in error["message"] and "empty" in error["message"]
        assert client.post("/chats/import", json={"messages": [{"role": "robot", "text": "x", "time": "2024-01-01T00:00:00Z"}]}).status_code == 422
        assert client.get("/chats").json()["chats"] == []
        assert server.client().post("/chats/import", json=HISTORY).status_code == 401


def test_the_import_route_takes_a_body_larger_than_the_other_routes_limit(server, owner):
    long_text = "word " * 3_900  # under the 20,000-character message limit
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "text": long_text, "time": f"2024-01-01T00:{i:02d}:00Z"} for i in range(60)
    ]
    body = {"messages": messages[:-1] + [{**messages[-1], "text": "\x00"}]}  # refused after the body is read whole
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=body)
        assert response.status_code == 422, response.text  # > 1 MB, yet read and validated
        assert "NUL" in response.json()["error"]["message"]
        assert client.post("/chats", json={"messages": [long_text] * 60}).status_code == 413
