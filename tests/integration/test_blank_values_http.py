"""Blank values on a live server (`memory-agent serve` on a real Postgres): a text that shows nothing
(empty, spaces, or only invisible characters such as U+200B, a BOM, a soft hyphen, U+3164) is never
stored as a value. A blank message is 422 ``invalid_message``; a blank profile field, preference,
list item, fact text or task due date is 422 ``invalid_request`` and nothing changes; null clears
a field (docs/api.md, "Blank values")."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.support.http_server import create_keys, new_chat, new_user, start_server

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess

INVISIBLE = ["\u200b\u2060", "\ufeff", "\u00ad", "\u3164", "\u202e", "\u115f\u1160", "\uffa0"]
BLANK = ["", "   ", " \n\t ", *INVISIBLE]


@pytest.fixture(scope="module")
def server(new_database):
    live = start_server(new_database("blank_values"), workers=1)
    yield live
    live.stop()


@pytest.fixture
async def account(server):
    user = new_user()
    return user, (await create_keys(server.database_url, [user]))[user]


@pytest.fixture
def client(server, account):
    with server.client(account[1]) as c:
        yield c


def refused(response, code: str = "invalid_request") -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return error["message"]


def put_items(server, user: str, rows: list[tuple[str, str, dict]]) -> None:
    """Items as they sit in the store (what an earlier version, or anything else, wrote there)."""
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        for part, key, value in rows:
            conn.execute("INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s)", (f"users.{user}.{part}", key, Jsonb(value)))


def test_blank_profile_fields_and_goals_are_422_and_the_profile_is_unchanged(client):
    kept = client.patch("/memory/profile", json={"name": "Dana", "location": "Haifa", "goals": ["learn Italian"]}).json()
    refused(client.patch("/memory/profile", json={"name": "   ", "location": "", "goals": ["", "  "]}))
    for blank in BLANK:
        assert "blank" in refused(client.patch("/memory/profile", json={"name": blank})), repr(blank)
        refused(client.patch("/memory/profile", json={"goals": ["learn Spanish", blank]}))
        refused(client.patch("/memory/profile", json={"role": blank, "level": "B2"}))  # the whole body or nothing
    assert client.get("/memory/profile").json() == kept


def test_blank_preferences_and_notes_are_422_and_the_preferences_are_unchanged(client):
    kept = client.patch("/memory/preferences", json={"tone": "warm", "other_notes": ["no emojis"]}).json()
    refused(client.patch("/memory/preferences", json={"tone": " ", "other_notes": [""]}))
    for blank in BLANK:
        refused(client.patch("/memory/preferences", json={"tone": blank}))
        refused(client.patch("/memory/preferences", json={"language": blank}))
        refused(client.patch("/memory/preferences", json={"other_notes": [blank]}))
    assert client.get("/memory/preferences").json() == kept


def test_null_still_clears_a_field_and_visible_text_is_kept_exactly(client):
    client.patch("/memory/profile", json={"name": "Dana", "goals": ["learn Italian"]})
    cleared = client.patch("/memory/profile", json={"name": None, "goals": []}).json()
    assert cleared["name"] is None and cleared["goals"] == []
    # Invisible characters only make a text blank when nothing else is there; otherwise they stay.
    kept = client.patch("/memory/profile", json={"name": "\u200bDana\u00ad", "goals": ["\ufeffski"]}).json()
    assert kept["name"] == "\u200bDana\u00ad" and kept["goals"] == ["\ufeffski"]


def test_a_blank_due_date_or_fact_text_is_422_and_the_item_is_unchanged(server, client, account):
    user, _ = account
    put_items(server, user, [
        ("tasks", "t1", {"id": "t1", "description": "Renew my passport", "status": "open", "due": "Friday", "hash": "h1"}),
        ("facts", "f1", {"id": "f1", "text": "Has a dog named Rex", "hash": "h2", "status": "active"}),
    ])
    for blank in BLANK:
        refused(client.patch("/memory/tasks/t1", json={"due": blank}))
        refused(client.patch("/memory/tasks/t1", json={"description": blank}))
        refused(client.patch("/memory/facts/f1", json={"text": blank}))
    (task,) = client.get("/memory/tasks").json()["tasks"]
    assert task["due"] == "Friday" and task["description"] == "Renew my passport"
    assert client.get("/memory/facts").json()["facts"][0]["text"] == "Has a dog named Rex"
    assert client.patch("/memory/tasks/t1", json={"due": None}).json()["due"] is None  # null clears it


def test_a_blank_value_stored_before_stays_readable_and_the_rest_editable(server, client, account):
    user, _ = account
    put_items(server, user, [("profile", "profile", {"profile": {"name": "   ", "goals": [""]}, "preferences": {"tone": "\u200b"}})])
    assert client.get("/memory/profile").json()["name"] == "   "
    patched = client.patch("/memory/profile", json={"location": "Haifa"})
    assert patched.status_code == 200 and patched.json()["location"] == "Haifa"
    assert client.patch("/memory/profile", json={"name": None}).json()["name"] is None


def test_a_message_of_invisible_characters_is_empty_like_one_of_spaces(client):
    chat_id = new_chat(client)
    for text in ["", " \n ", *INVISIBLE]:
        assert "The message is empty" in refused(client.post(f"/chats/{chat_id}/messages", json={"text": text}), "invalid_message"), repr(text)
        refused(client.post("/chats", json={"messages": [text]}), "invalid_message")
    assert client.get(f"/chats/{chat_id}").json()["messages"] == []
    assert [c["id"] for c in client.get("/chats").json()["chats"]] == [chat_id]  # no chat was made by a refused first message


def test_a_blank_chat_title_is_422_on_rename_and_no_title_at_creation(client):
    chat_id = new_chat(client, title="Kept")
    for blank in ["   ", "\u200b", "\u3164"]:
        refused(client.patch(f"/chats/{chat_id}", json={"title": blank}))
    assert client.get(f"/chats/{chat_id}").json()["chat"]["title"] == "Kept"
    created = client.post("/chats", json={"title": "\ufeff"}).json()["chat"]
    assert created["title_set_by_user"] is False


def test_a_blank_text_to_forget_or_chat_search_is_422_not_a_look_for_nothing(client):
    """Blank words to forget were looked for: 404 "Anything remembered about '' not found", as if
    they had named something; a search of only invisible characters was answered 200 with whatever
    they ranked (only spaces were refused)."""
    for blank in BLANK:
        assert "empty" in refused(client.post("/memory/forget", json={"text": blank})), repr(blank)
        refused(client.get("/chats/search", params={"q": blank}))
    assert client.post("/memory/forget", json={"text": "Porto"}).status_code == 404  # words that name nothing: as before
