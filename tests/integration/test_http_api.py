"""The chat API on a live server: `memory-agent serve` (uvicorn, 2 workers) on a real Postgres.

Every endpoint and every error code (401, 403, 404, 409, 413, 422). The model is the
offline one plus two cues (tests/support/http_server.py): "[slow]" streams slowly so a
reply can be stopped mid-stream, "[task] …" proposes a task and waits for a confirmation.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time

import psycopg
import pytest

from graph.assembly import MEMORY_PHASE
from tests.conftest import REPO_ROOT
from tests.support.dated_tasks import dated_now
from tests.support.graph_turns import turn_paused_at_commit_point
from tests.support.http_server import (
    BackgroundStream,
    client_on_worker,
    final,
    live_server_fixture,
    new_account,
    new_chat,
    new_user,
    reply_text,
    say,
    start_server,
    stream,
)

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess with workers


server = live_server_fixture("http")


@pytest.fixture
async def account(server):
    """A fresh user and their API key."""
    return await new_account(server)


@pytest.fixture
def client(server, account):
    with server.client(account[1]) as c:
        yield c


@pytest.fixture
async def stranger(server):
    return await new_account(server)


def error_of(response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return response.status_code, body["error"]["code"]


def db_rows(database_url: str, sql: str, params=()) -> list[tuple]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchall()


# --------------------------------------------------------------------------- system endpoints
def test_openapi_schema_documents_every_endpoint(server):
    schema = server.client().get("/openapi.json").json()
    expected = {
        "/chats": {"get", "post"},
        "/chats/search": {"get"},
        "/chats/import": {"post"},
        "/chats/{chat_id}": {"get", "patch", "delete"},
        "/chats/{chat_id}/messages": {"post"},
        "/chats/{chat_id}/messages/{message_id}": {"put"},
        "/chats/{chat_id}/messages/{message_id}/regenerate": {"post"},
        "/chats/{chat_id}/resume": {"post"},
        "/chats/{chat_id}/stop": {"post"},
        "/memory/profile": {"get", "patch", "delete"},
        "/memory/preferences": {"get", "patch", "delete"},
        "/memory/facts": {"get"},
        "/memory/facts/{fact_id}": {"patch", "delete"},
        "/memory/tasks": {"get"},
        "/memory/tasks/{task_id}": {"patch", "delete"},
        "/me": {"get", "delete"},
        "/personas": {"get"},
        "/healthz": {"get"},
        "/metrics": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(schema["paths"][path]), path
    assert "text/event-stream" in schema["paths"]["/chats/{chat_id}/messages"]["post"]["responses"]["200"]["content"]
    assert "ErrorResponse" in schema["components"]["schemas"]


def test_healthz_pings_the_database_and_names_the_worker(server):
    response = server.client().get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["worker_pid"] == int(response.headers["x-worker-pid"])
    assert body["worker_pid"] in server.worker_pids and len(server.worker_pids) == 2


def test_personas_are_the_prompt_files(server):
    personas = {p["name"]: p for p in server.client().get("/personas").json()["personas"]}
    assert {"assistant", "tutor", "planner"} <= set(personas)
    assert personas["tutor"]["title"] and personas["tutor"]["description"]


def test_web_page_and_its_assets_are_served(server):
    with server.client() as c:
        page = c.get("/")
        assert page.status_code == 200 and 'data-testid="chat-list"' in page.text
        assert c.get("/static/app.js").status_code == 200
        assert "--accent" in c.get("/static/style.css").text


# --------------------------------------------------------------------------- auth
def test_missing_unknown_or_malformed_keys_are_401_and_both_headers_work(server, account):
    user, key = account
    with server.client() as anonymous:
        assert error_of(anonymous.get("/chats")) == (401, "unauthorized")
        assert anonymous.get("/chats").headers["www-authenticate"] == "Bearer"
        assert error_of(anonymous.get("/chats", headers={"Authorization": "Bearer ma_00000000_nope"})) == (401, "unauthorized")
        assert error_of(anonymous.get("/chats", headers={"Authorization": "Bearer not-a-key"})) == (401, "unauthorized")
        assert error_of(anonymous.get("/memory/facts", headers={"X-API-Key": key + "x"})) == (401, "unauthorized")
        assert anonymous.get("/me", headers={"X-API-Key": key}).json() == {"user_id": user, "auth": "on"}
        assert anonymous.get("/me", headers={"Authorization": f"Bearer {key}"}).json()["user_id"] == user


def keys_cli(server, *args: str) -> subprocess.CompletedProcess:
    from tests.support.http_server import server_env

    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "keys", *args],
        cwd=REPO_ROOT,
        env=server_env(server.database_url, "offline"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_keys_cli_creates_a_key_once_lists_it_without_the_secret_and_revokes_it(server):
    user = new_user()
    created = keys_cli(server, "create", "--user", user, "--label", "laptop")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    prefix = key.split("_")[1]
    with server.client(key) as c:
        assert c.get("/me").json()["user_id"] == user

    listed = keys_cli(server, "list", "--user", user)
    assert listed.returncode == 0 and prefix in listed.stdout and "laptop" in listed.stdout
    assert key not in listed.stdout and key.split("_", 2)[2] not in listed.stdout

    revoked = keys_cli(server, "revoke", prefix)
    assert revoked.returncode == 0, revoked.stderr
    with server.client(key) as c:
        assert error_of(c.get("/me")) == (401, "unauthorized")
    assert keys_cli(server, "revoke", prefix).returncode == 1  # already revoked: says so


def test_revoking_by_the_whole_key_never_prints_its_secret(server):
    """`keys revoke <whole key>` printed "Revoked key ma_<prefix>_<secret>." (and the error repeated it)."""
    key = keys_cli(server, "create", "--user", new_user()).stdout.strip()
    prefix, secret = key.split("_")[1], key.split("_", 2)[2]
    for returncode in (0, 1):  # revoked, then "no active key" for the same words
        said = keys_cli(server, "revoke", key)
        assert said.returncode == returncode and prefix in said.stdout + said.stderr
        assert secret not in said.stdout + said.stderr


def test_serve_printed_a_working_key_for_the_local_user_on_first_start(server):
    assert server.local_key, server.log()
    assert f"/#key={server.local_key}" in server.log()
    with server.client(server.local_key) as c:
        assert c.get("/me").json() == {"user_id": "local", "auth": "on"}


async def test_a_restart_after_the_local_users_key_was_revoked_prints_no_new_key(new_database):
    """Every start whose `local` had no active key made one and printed it: revoking a leaked key
    of `local` was undone by the next restart, with a working key in the server's log."""
    from app.http.serve import prepare_database
    from memory.backend import open_memory
    from storage import api_keys

    url = new_database("restart")
    first = await prepare_database(url, auth_on=True)
    assert first and await prepare_database(url, auth_on=True) is None
    async with open_memory(url, max_pool_size=2) as backend:
        assert await api_keys.revoke_key(backend.pool, first)
        assert await prepare_database(url, auth_on=True) is None
        assert [k.revoked_at is not None for k in await api_keys.list_keys(backend.pool, "local")] == [True]


# --------------------------------------------------------------------------- chats
def test_a_message_streams_tokens_then_memory_then_done_with_ids_and_token_usage(client):
    chat_id = new_chat(client, title="Introductions", persona="assistant")
    events = say(client, chat_id, "My name is Dana and I have a dog named Rex")
    names = [e.name for e in events]
    assert names[0] == "token" and names[-1] == "done"
    assert names.index("memory") > max(i for i, n in enumerate(names) if n == "token")
    memory = next(e for e in events if e.name == "memory").data
    assert memory["profile_changes"] == {"name": "Dana"} and memory["facts_added"] == ["Has a dog named Rex"]

    done = final(events).data
    assert reply_text(events) == done["reply"] and done["reply"].startswith("(offline model)")
    assert done["usage"]["input_tokens"] > 0 and done["usage"]["output_tokens"] > 0
    assert done["tokens_in"] == done["usage"]["input_tokens"]

    detail = client.get(f"/chats/{chat_id}").json()
    assert [(m["role"], m["id"]) for m in detail["messages"]] == [("user", done["user_message_id"]), ("assistant", done["message_id"])]
    assert detail["chat"]["title"] == "Introductions" and detail["chat"]["message_count"] == 2
    assert detail["model_view"]["message_ids"] == [done["user_message_id"], done["message_id"]]
    assert detail["pending_interrupts"] == [] and detail["running"] is False


def test_first_messages_given_at_creation_are_answered_in_order(client):
    response = client.post("/chats", json={"persona": "tutor", "messages": ["My name is Noa", "I live in Haifa"]})
    assert response.status_code == 201
    detail = response.json()
    assert detail["chat"]["persona"] == "tutor"
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["My name is Noa", "I live in Haifa"]
    assert "Noa" in detail["messages"][3]["content"]  # the second answer knew the first
    assert client.get("/memory/profile").json()["location"] == "Haifa"


def test_chat_list_is_newest_first_with_title_snippet_and_message_count(client):
    first = new_chat(client, title="First")
    second = new_chat(client)
    say(client, first, "I like hiking in the mountains")
    chats = client.get("/chats").json()["chats"]
    assert [c["id"] for c in chats] == [first, second]
    top = chats[0]
    assert top["title"] == "First" and top["message_count"] == 2 and "hiking" in top["summary_snippet"]
    assert chats[1]["title"] == "New chat" and chats[1]["message_count"] == 0


def test_the_full_history_shows_the_summary_board_and_what_the_model_sees(client):
    chat_id = new_chat(client)
    # Past the summary window (30 messages) the oldest are folded into the summary.
    for i in range(16):
        say(client, chat_id, f"Note number {i}: the meeting about budget item {i} moved to room {100 + i}")
    detail = client.get(f"/chats/{chat_id}").json()
    assert len(detail["messages"]) == 32
    view = detail["model_view"]
    assert view["summary_folds"] >= 1 and view["summary"] == render(detail["summary"])
    folded = [m for m in detail["messages"] if not m["in_model_view"]]
    assert folded and folded[-1]["id"] == view["summarized_through"]
    assert view["message_ids"] == [m["id"] for m in detail["messages"] if m["in_model_view"]]
    assert len(view["message_ids"]) < 32


def render(board: dict) -> str:
    from core.schemas import SummaryBoard

    return SummaryBoard.model_validate(board).render()


def test_another_users_chat_is_403_and_an_unknown_chat_is_404_everywhere(server, client, stranger):
    chat_id = new_chat(client)
    say(client, chat_id, "hello")
    message_id = client.get(f"/chats/{chat_id}").json()["messages"][0]["id"]
    calls = [
        ("GET", "/chats/{}", None),
        ("DELETE", "/chats/{}", None),
        ("POST", "/chats/{}/messages", {"text": "hi"}),
        ("POST", "/chats/{}/stop", None),
        ("POST", "/chats/{}/resume", {"approved": True}),
        ("PUT", "/chats/{}/messages/" + message_id, {"text": "hi"}),
    ]
    with server.client(stranger[1]) as other:
        for method, path, body in calls:
            assert error_of(other.request(method, path.format(chat_id), json=body)) == (403, "forbidden"), (method, path)
            assert error_of(other.request(method, path.format("no-such-chat"), json=body)) == (404, "not_found"), (method, path)
    assert len(client.get(f"/chats/{chat_id}").json()["messages"]) == 2  # untouched


def test_unknown_route_and_method_errors_have_the_error_shape(client):
    assert error_of(client.get("/nowhere")) == (404, "not_found")
    assert error_of(client.patch("/chats")) == (405, "method_not_allowed")


# --------------------------------------------------------------------------- refused input
def test_empty_blank_and_nul_messages_are_422_and_nothing_is_stored(client):
    chat_id = new_chat(client)
    for text in ("", "   \n", "bad\x00byte"):
        status, code = error_of(client.post(f"/chats/{chat_id}/messages", json={"text": text}))
        assert (status, code) == (422, "invalid_message"), text
    assert error_of(client.post(f"/chats/{chat_id}/messages", json={})) == (422, "invalid_request")
    assert error_of(client.post(f"/chats/{chat_id}/messages", json={"text": 5})) == (422, "invalid_request")
    assert error_of(client.post(f"/chats/{chat_id}/messages", content=b"{not json", headers={"content-type": "application/json"})) == (
        422,
        "invalid_request",
    )
    assert client.get(f"/chats/{chat_id}").json()["messages"] == []


def test_an_oversized_message_is_413_with_the_limit_and_nothing_is_stored(client):
    chat_id = new_chat(client)
    response = client.post(f"/chats/{chat_id}/messages", json={"text": "x" * 20001})
    assert error_of(response) == (413, "message_too_long")
    assert "20,000" in response.json()["error"]["message"]
    assert error_of(client.post("/chats", json={"messages": ["y" * 20001]})) == (413, "message_too_long")
    assert error_of(client.post(f"/chats/{chat_id}/messages", content=b"x" * 1_500_000, headers={"content-type": "application/json"})) == (
        413,
        "request_too_large",
    )
    assert client.get(f"/chats/{chat_id}").json()["messages"] == []
    say(client, chat_id, "x" * 20000)  # exactly the limit is fine


def test_a_chat_created_with_no_body_at_all_is_a_new_chat_of_the_defaults(client):
    """Every field of the body is optional, yet a POST /chats with none (fetch(url, {method: "POST"}))
    was 422 "send the body as JSON"."""
    response = client.post("/chats")
    assert response.status_code == 201, response.text
    assert response.json()["messages"] == [] and response.json()["chat"]["title"]
    assert error_of(client.post("/chats", content=b"{", headers={"content-type": "application/json"}))[0] in (400, 422)  # a body that is there is still read


def test_a_body_that_is_not_json_is_named_so_not_as_a_field_at_a_byte_position(client):
    """'{' or {'text': 'hi'} was answered "Invalid request: 1: JSON decode error"."""
    chat_id = new_chat(client)
    for body in (b"{", b"{'text': 'hi'}", b'{"text": "hi",}'):
        response = client.post(f"/chats/{chat_id}/messages", content=body, headers={"content-type": "application/json"})
        message = response.json()["error"]["message"]
        assert response.status_code == 422 and message.startswith("Invalid request: the body is not valid JSON (") and "at character" in message, message


def test_bad_chat_creation_bodies_are_422(client):
    assert error_of(client.post("/chats", json={"persona": "pirate"})) == (422, "invalid_request")
    assert error_of(client.post("/chats", json={"colour": "blue"})) == (422, "invalid_request")
    assert error_of(client.post("/chats", json={"messages": [""]})) == (422, "invalid_message")
    assert error_of(client.post("/chats", json={"messages": ["hi"] * 11})) == (422, "invalid_request")
    assert error_of(client.get("/chats/search")) == (422, "invalid_request")
    assert error_of(client.get("/chats/search", params={"q": "   "})) == (422, "invalid_request")
    # JSON sent without its media type is not read as JSON: the error says so ("Input should be a valid dictionary" did not).
    plain = client.post("/chats", content='{"title": "Trip"}', headers={"Content-Type": "text/plain"})
    assert error_of(plain) == (422, "invalid_request") and "Content-Type: application/json" in plain.json()["error"]["message"]


# --------------------------------------------------------------------------- one writer per chat, stop
def test_a_second_message_while_a_reply_is_running_is_409_on_any_worker(server, account):
    user, key = account
    with server.client(key) as c:
        chat_id = new_chat(c)
    # A long reply (~15 s; it is stopped below): finding each worker takes new connections, slow on a loaded machine.
    running = BackgroundStream(server, key, "POST", f"/chats/{chat_id}/messages", {"text": "[slow] [markdown] tell me a long story"})
    running.wait_for_tokens()
    for other in (False, True):  # the worker that runs the reply, then the other one
        with client_on_worker(server, key, running.worker_pid, other=other) as c:
            response = c.post(f"/chats/{chat_id}/messages", json={"text": "are you done?"})
            assert error_of(response) == (409, "reply_in_progress")
            assert c.delete(f"/chats/{chat_id}").status_code == 409
            assert c.get(f"/chats/{chat_id}").json()["running"] is True
    with server.client(key) as c:
        assert c.post(f"/chats/{chat_id}/stop").json()["stopped"] is True
    running.join()


def checkpoint_counts(database_url: str, thread_id: str) -> tuple[int, int, int]:
    return tuple(
        db_rows(database_url, f"SELECT count(*) FROM {table} WHERE thread_id = %s", (thread_id,))[0][0]
        for table in ("checkpoints", "checkpoint_writes", "checkpoint_blobs")
    )


STOPPED_MESSAGE = "[slow] [markdown] I live in Rome and I have a cat named Tom"


@pytest.mark.parametrize("from_other_worker", [False, True], ids=["same-worker", "other-worker"])
def test_stop_mid_stream_keeps_the_partial_reply_marked_stopped_and_nothing_is_learned(server, account, from_other_worker):
    user, key = account
    with server.client(key) as c:
        chat_id = new_chat(c)
        say(c, chat_id, "My name is Dana")
        before = c.get(f"/chats/{chat_id}").json()
    head_before = db_rows(server.database_url, "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = %s", (chat_id,))[0][0]

    # A long reply (~9 s at the slow pace): the stop must land while it streams, also on a loaded
    # machine where finding a connection on the other worker takes a while.
    running = BackgroundStream(server, key, "POST", f"/chats/{chat_id}/messages", {"text": STOPPED_MESSAGE})
    running.wait_for_tokens()
    with client_on_worker(server, key, running.worker_pid, other=from_other_worker) as c:
        stopped = c.post(f"/chats/{chat_id}/stop")
        assert (int(stopped.headers["x-worker-pid"]) != running.worker_pid) == from_other_worker
    assert stopped.json()["stopped"] is True and stopped.json()["status"] == "stopped"

    events = running.join()
    assert events[0].name == "token"
    end = final(events)
    assert end.name == "error" and end.data["code"] == "stopped"
    assert end.data["reply"] == reply_text(events)
    assert not any(e.name in ("done", "memory") for e in events)

    with server.client(key) as c:
        after = c.get(f"/chats/{chat_id}").json()
        assert after["messages"][:2] == before["messages"]
        kept = after["messages"][2:]  # the message, and the reply as far as it streamed
        assert [(m["role"], m["content"], m["stopped"]) for m in kept] == [
            ("user", STOPPED_MESSAGE, False),
            ("assistant", reply_text(events), True),
        ]
        assert all(m["sent_at"] for m in kept)  # the message keeps the time it was sent (it was kept undated)
        assert kept[0]["sent_at"] <= kept[1]["sent_at"]
        assert after["running"] is False
        profile = c.get("/memory/profile").json()
        assert profile["name"] == "Dana" and profile["location"] is None
        assert [f["text"] for f in c.get("/memory/facts").json()["facts"]] == []
        assert c.get("/chats").json()["chats"][0]["message_count"] == 4
    status = db_rows(server.database_url, "SELECT status FROM memory_agent_runs WHERE thread_id = %s ORDER BY started_at DESC LIMIT 1", (chat_id,))
    assert status == [("stopped",)]
    # The reply phase's checkpoints were taken back; the kept turn is one update, then one step a memory-phase node.
    newer = db_rows(
        server.database_url,
        "SELECT metadata ->> 'source' FROM checkpoints WHERE thread_id = %s AND checkpoint_id > %s ORDER BY checkpoint_id",
        (chat_id, head_before),
    )
    assert [r[0] for r in newer] == ["update", *["loop"] * len(MEMORY_PHASE)]

    with server.client(key) as c:  # the chat takes the next message at once
        done = final(say(c, chat_id, "I live in Paris")).data
        assert c.get("/memory/profile").json()["location"] == "Paris"
        assert [m["id"] for m in c.get(f"/chats/{chat_id}").json()["messages"]][-2:] == [done["user_message_id"], done["message_id"]]


def test_a_reply_phase_is_saved_once_where_it_stops_the_chats_first_turn_too(server, account, client):
    """Before the first token nothing reads a checkpoint per step (a reply cut short is taken back
    to the mark and kept from the run's row), so a turn saves its reply phase once, at the commit
    point. A new chat gets its empty checkpoint when it is created, the first message's fork point
    for an edit: its first turn had saved each step before its first token (three checkpoints).
    Meanwhile the chat lists the message being answered with its reply, once that is complete
    (docs/api.md)."""

    def sources(after: str | None) -> list[str]:
        return [r[0] for r in db_rows(
            server.database_url,
            "SELECT metadata ->> 'source' FROM checkpoints WHERE thread_id = %s AND checkpoint_id > %s ORDER BY checkpoint_id",
            (chat_id, after or ""),
        )]

    chat_id = new_chat(client)
    assert sources(None) == ["update"]  # the empty chat
    empty = db_rows(server.database_url, "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = %s", (chat_id,))[0][0]
    assert final(say(client, chat_id, "My name is Dana")).name == "done"
    assert sources(empty) == ["loop"] + ["loop"] * len(MEMORY_PHASE)  # the reply phase's one, then a node's each
    head = db_rows(server.database_url, "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = %s", (chat_id,))[0][0]

    running = BackgroundStream(server, account[1], "POST", f"/chats/{chat_id}/messages", {"text": "[slow] [markdown] I live in Paris"})  # a reply unlike the last: not held
    running.wait_for_tokens()
    during = client.get(f"/chats/{chat_id}").json()
    assert during["running"] is True and [m["role"] for m in during["messages"]] == ["user", "assistant"]
    assert final(running.join()).name == "done"
    assert sources(head) == ["loop"] + ["loop"] * len(MEMORY_PHASE)  # the reply phase's one, then a node's each
    messages = client.get(f"/chats/{chat_id}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert client.get("/memory/profile").json()["location"] == "Paris"
    # The second message can still be edited: the checkpoint before it is where the first turn ended;
    # and the first: the checkpoint before it is the empty chat's.
    edited = final(stream(client, "PUT", f"/chats/{chat_id}/messages/{messages[2]['id']}", {"text": "I live in Rome"}))
    assert edited.name == "done"
    assert client.get("/memory/profile").json()["location"] == "Rome"
    assert final(stream(client, "PUT", f"/chats/{chat_id}/messages/{messages[0]['id']}", {"text": "My name is Dina"})).name == "done"
    assert [m["content"] for m in client.get(f"/chats/{chat_id}").json()["messages"]][:1] == ["My name is Dina"]


def test_a_reply_that_fails_mid_stream_is_taken_back_and_the_chat_goes_on(server, client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    before = client.get(f"/chats/{chat_id}").json()["messages"]
    counts = checkpoint_counts(server.database_url, chat_id)
    events = say(client, chat_id, "[fail] I live in Rome")
    assert events[0].name == "token"  # it failed mid-stream, after words were shown
    end = final(events)
    assert end.name == "error" and end.data["code"] == "reply_failed" and "went away" in end.data["message"]
    assert end.data["text"] == "[fail] I live in Rome"
    assert client.get(f"/chats/{chat_id}").json()["messages"] == before
    assert checkpoint_counts(server.database_url, chat_id) == counts
    assert client.get("/memory/profile").json()["location"] is None
    assert final(say(client, chat_id, "I live in Paris")).name == "done"


def test_stop_with_nothing_running_says_idle(client):
    chat_id = new_chat(client)
    assert client.post(f"/chats/{chat_id}/stop").json() == {
        "stopped": False,
        "status": "idle",
        "run_id": None,
        "message": "No reply is running on this chat.",
    }


# --------------------------------------------------------------------------- edit and regenerate
def test_editing_a_message_forks_the_chat_and_later_messages_leave_the_models_view(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    say(client, chat_id, "I live in Rome")
    say(client, chat_id, "I have a cat named Tom")
    original = client.get(f"/chats/{chat_id}").json()["messages"]
    rome = original[2]
    assert rome["content"] == "I live in Rome"

    events = stream(client, "PUT", f"/chats/{chat_id}/messages/{rome['id']}", {"text": "I live in Haifa"})
    done = final(events)
    assert done.name == "done" and "Dana" in done.data["reply"]

    edited = client.get(f"/chats/{chat_id}").json()
    assert [m["content"] for m in edited["messages"]][:3] == ["My name is Dana", original[1]["content"], "I live in Haifa"]
    assert len(edited["messages"]) == 4
    assert [m["id"] for m in edited["messages"][:2]] == [m["id"] for m in original[:2]]
    gone = {m["id"] for m in original[2:]}
    assert not gone & set(edited["model_view"]["message_ids"])
    assert not gone & {m["id"] for m in edited["messages"]}
    assert client.get("/memory/profile").json()["location"] == "Haifa"  # the edited text was learned

    # The conversation goes on from the edited branch.
    after = final(say(client, chat_id, "What do you know about me?")).data["reply"]
    assert "Haifa" in after
    assert len(client.get(f"/chats/{chat_id}").json()["messages"]) == 6


def test_an_edit_retracts_what_only_the_edited_away_message_taught_and_the_passport_ends_with_one_task(client):
    chat_id = new_chat(client)
    say(client, chat_id, "Remind me to renew my passport next week")
    # A task's text carries the date its words meant (issue 30), so the expected text is dated as of now.
    assert [t["description"] for t in client.get("/memory/tasks").json()["tasks"]] == [dated_now("renew my passport next week", "next week")]
    first = client.get(f"/chats/{chat_id}").json()["messages"][0]

    final(stream(client, "PUT", f"/chats/{chat_id}/messages/{first['id']}", {"text": "Remind me to renew my passport tomorrow"}))
    tasks = client.get("/memory/tasks").json()["tasks"]
    assert [(t["description"], t["status"]) for t in tasks] == [(dated_now("renew my passport tomorrow", "tomorrow"), "open")]


def test_an_edit_takes_back_the_profile_field_preference_and_title_only_the_edited_away_message_gave(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")  # the opening, edited below
    say(client, chat_id, "I work as a pilot and I prefer short answers")
    assert client.get("/memory/profile").json()["role"] == "pilot"
    assert client.get("/memory/preferences").json()["answer_length"] == "short"
    messages = client.get(f"/chats/{chat_id}").json()["messages"]
    events = stream(client, "PUT", f"/chats/{chat_id}/messages/{messages[2]['id']}", {"text": "Hello there."})
    retracted = [e.data["retracted"] for e in events if e.name == "memory" and "retracted" in e.data]
    assert retracted and set(retracted[0]["fields"]) == {"profile.role", "preferences.answer_length"}
    profile = client.get("/memory/profile").json()
    assert profile["role"] is None and profile["name"] == "Dana"  # what the kept opening said stays
    assert client.get("/memory/preferences").json()["answer_length"] is None
    # The opening edited: the title it gave is made again from the new one.
    assert "Dana" in client.get(f"/chats/{chat_id}").json()["chat"]["title"]
    final(stream(client, "PUT", f"/chats/{chat_id}/messages/{messages[0]['id']}", {"text": "Tell me about volcanoes"}))
    chat = client.get(f"/chats/{chat_id}").json()["chat"]
    assert chat["title"].lower().startswith("volcano")  # (the reply, written before the retraction, still named Dana)
    assert client.get("/memory/profile").json()["name"] is None


def test_a_long_chat_and_the_chat_list_are_read_a_page_at_a_time(client):
    chat_id = new_chat(client)
    for text in ("first", "second", "third"):
        say(client, chat_id, text)
    whole = client.get(f"/chats/{chat_id}").json()
    ids = [m["id"] for m in whole["messages"]]
    assert len(ids) == 6 and whole["messages_total"] == 6 and whole["has_earlier"] is False
    newest = client.get(f"/chats/{chat_id}", params={"limit": 2}).json()
    assert [m["id"] for m in newest["messages"]] == ids[-2:] and newest["has_earlier"] is True and newest["messages_total"] == 6
    earlier = client.get(f"/chats/{chat_id}", params={"limit": 2, "before": ids[-2]}).json()
    assert [m["id"] for m in earlier["messages"]] == ids[2:4] and earlier["has_earlier"] is True
    first = client.get(f"/chats/{chat_id}", params={"limit": 5, "before": ids[2]}).json()
    assert [m["id"] for m in first["messages"]] == ids[:2] and first["has_earlier"] is False
    assert error_of(client.get(f"/chats/{chat_id}", params={"before": "no-such-message"})) == (404, "not_found")
    assert error_of(client.get(f"/chats/{chat_id}", params={"limit": 0})) == (422, "invalid_request")
    other = new_chat(client)
    listed = client.get("/chats", params={"limit": 1}).json()
    assert [c["id"] for c in listed["chats"]] == [other] and listed["total"] >= 2
    assert client.get("/chats", params={"limit": 1, "offset": 1}).json()["chats"][0]["id"] == chat_id


def test_editing_the_first_message_regenerates_the_whole_chat(client):
    chat_id = new_chat(client)
    say(client, chat_id, "hello there")
    say(client, chat_id, "second message")
    first = client.get(f"/chats/{chat_id}").json()["messages"][0]
    final(stream(client, "PUT", f"/chats/{chat_id}/messages/{first['id']}", {"text": "hello again"}))
    messages = client.get(f"/chats/{chat_id}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[0]["content"] == "hello again"


def test_editing_an_unknown_or_assistant_message_or_with_empty_text_is_refused(client):
    chat_id = new_chat(client)
    say(client, chat_id, "hello")
    reply = client.get(f"/chats/{chat_id}").json()["messages"][1]
    assert error_of(client.put(f"/chats/{chat_id}/messages/nope", json={"text": "x"})) == (404, "not_found")
    assert error_of(client.put(f"/chats/{chat_id}/messages/{reply['id']}", json={"text": "x"})) == (422, "invalid_request")
    assert error_of(client.put(f"/chats/{chat_id}/messages/{reply['id']}", json={"text": " "})) == (422, "invalid_message")
    say(client, chat_id, "the chat still works")  # the refused edits released the chat


# --------------------------------------------------------------------------- confirmations (interrupts)
def test_a_task_change_waits_for_confirmation_and_resume_applies_it_once(client):
    chat_id = new_chat(client, persona="planner")
    events = say(client, chat_id, "[task] Buy milk")
    end = final(events)
    assert end.name == "interrupt"
    (pending,) = end.data["interrupts"]
    assert {"type": "task_change", "action": "add", "description": "Buy milk"}.items() <= pending["value"].items()

    detail = client.get(f"/chats/{chat_id}").json()
    assert [p["id"] for p in detail["pending_interrupts"]] == [pending["id"]]
    assert error_of(client.post(f"/chats/{chat_id}/messages", json={"text": "hello?"})) == (409, "confirmation_pending")
    assert client.get("/memory/tasks").json()["tasks"] == []

    resumed = stream(client, "POST", f"/chats/{chat_id}/resume", {"approved": True, "interrupt_id": pending["id"]})
    assert final(resumed).name == "done"
    assert [t["description"] for t in client.get("/memory/tasks").json()["tasks"]] == ["Buy milk"]
    detail = client.get(f"/chats/{chat_id}").json()
    assert detail["pending_interrupts"] == []
    roles = [m["role"] for m in detail["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert detail["messages"][1]["tool_calls"][0]["name"] == "add_task"
    assert error_of(client.post(f"/chats/{chat_id}/resume", json={"approved": True})) == (409, "no_pending_confirmation")


def test_a_message_is_not_deleted_while_a_confirmation_waits_and_is_once_it_is_answered(client):
    """Deleting the asking turn's message dropped the confirmation silently (the task change was
    neither applied nor declined, and nothing said so)."""
    chat_id = new_chat(client)
    assert final(say(client, chat_id, "[task] Buy milk")).name == "interrupt"
    asked = client.get(f"/chats/{chat_id}").json()["messages"][0]
    assert error_of(client.delete(f"/chats/{chat_id}/messages/{asked['id']}")) == (409, "confirmation_pending")
    assert len(client.get(f"/chats/{chat_id}").json()["pending_interrupts"]) == 1

    assert final(stream(client, "POST", f"/chats/{chat_id}/resume", {"approved": False})).name == "done"
    assert client.delete(f"/chats/{chat_id}/messages/{asked['id']}").status_code == 200


def test_a_declined_task_change_changes_nothing(client):
    chat_id = new_chat(client)
    assert final(say(client, chat_id, "[task] Call the bank")).name == "interrupt"
    assert error_of(client.post(f"/chats/{chat_id}/resume", json={"approved": False, "interrupt_id": "nope"})) == (404, "not_found")
    assert final(stream(client, "POST", f"/chats/{chat_id}/resume", {"approved": False})).name == "done"
    assert client.get("/memory/tasks").json()["tasks"] == []
    tool = next(m for m in client.get(f"/chats/{chat_id}").json()["messages"] if m["role"] == "tool")
    assert "declined" in tool["content"]


# --------------------------------------------------------------------------- search
def test_search_gives_one_clear_match_or_several_candidates_with_scores(client):
    dog = new_chat(client)
    say(client, dog, "My dog Rex keeps barking at night, how do I train him to be quiet?")
    trip = new_chat(client)
    say(client, trip, "I am planning a trip to Japan in April: Tokyo, Kyoto and Osaka")
    code = new_chat(client)
    say(client, code, "My Python script raises a KeyError when reading the JSON config file")

    found = client.get("/chats/search", params={"q": "training my barking dog"}).json()
    assert found["outcome"] == "one" and found["match"]["chat"]["id"] == dog
    assert found["match"]["score"] >= 0.55 and "similarity" in found["formula"]
    assert found["candidates"][0] == found["match"]

    vague = client.get("/chats/search", params={"q": "the chat where I asked for help"}).json()
    assert vague["outcome"] in ("several", "none") and vague["match"] is None
    for hit in vague["candidates"]:
        assert 0 <= hit["similarity"] <= 1 and 0 < hit["recency"] <= 1
        assert hit["score"] == pytest.approx(0.8 * hit["similarity"] + 0.2 * hit["recency"], abs=1e-3)
    scores = [h["score"] for h in vague["candidates"]]
    assert scores == sorted(scores, reverse=True)

    assert client.get("/chats/search", params={"q": "Kyoto temples"}).json()["match"]["chat"]["id"] == trip


def test_search_only_sees_the_callers_chats(server, client, stranger):
    mine = new_chat(client)
    say(client, mine, "My dog Rex keeps barking at night")
    with server.client(stranger[1]) as other:
        assert other.get("/chats/search", params={"q": "barking dog"}).json()["outcome"] == "none"


# --------------------------------------------------------------------------- memory
def test_profile_and_preferences_can_be_viewed_corrected_and_cleared(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana and I live in Haifa")
    assert client.get("/memory/profile").json()["location"] == "Haifa"

    patched = client.patch("/memory/profile", json={"location": "Tel Aviv", "goals": ["learn Italian"]}).json()
    assert patched["location"] == "Tel Aviv" and patched["name"] == "Dana" and patched["goals"] == ["learn Italian"]
    assert client.patch("/memory/profile", json={"name": None}).json()["name"] is None
    assert error_of(client.patch("/memory/profile", json={"shoe_size": 42})) == (422, "invalid_request")

    prefs = client.patch("/memory/preferences", json={"answer_length": "short", "code_examples": True}).json()
    assert prefs["answer_length"] == "short" and prefs["code_examples"] is True
    assert error_of(client.patch("/memory/preferences", json={"answer_length": "epic"})) == (422, "invalid_request")
    assert "short answers" in final(say(client, chat_id, "hi")).data["reply"]  # the next turn uses the correction

    assert client.delete("/memory/preferences").json()["answer_length"] is None
    assert client.get("/memory/profile").json()["location"] == "Tel Aviv"  # untouched by the preferences reset
    assert client.delete("/memory/profile").json() == {
        "name": None, "native_language": None, "level": None, "role": None, "location": None, "goals": [],
    }


def test_a_corrected_fact_is_re_embedded_and_a_deleted_one_is_gone(server, client, account):
    user, _ = account
    chat_id = new_chat(client)
    say(client, chat_id, "I have a dog named Rex")
    (fact,) = client.get("/memory/facts").json()["facts"]
    assert fact["text"] == "Has a dog named Rex"

    def embedding() -> str:
        return db_rows(
            server.database_url,
            "SELECT embedding::text FROM store_vectors WHERE prefix = %s AND key = %s",
            (f"users.{user}.facts", fact["id"]),
        )[0][0]

    before = embedding()
    patched = client.patch(f"/memory/facts/{fact['id']}", json={"text": "Has a cat named Tom", "importance": "high"}).json()
    assert patched["text"] == "Has a cat named Tom" and patched["importance"] == "high"
    assert embedding() != before
    assert "Has a cat named Tom" in final(say(client, chat_id, "tell me about my cat")).data["reply"]

    assert error_of(client.patch("/memory/facts/nope", json={"text": "x"})) == (404, "not_found")
    assert error_of(client.patch(f"/memory/facts/{fact['id']}", json={"text": ""})) == (422, "invalid_request")
    # A text sent as null is refused, not taken for one left out (it answered 200 and changed nothing).
    refused = client.patch(f"/memory/facts/{fact['id']}", json={"text": None})
    assert error_of(refused) == (422, "invalid_request") and "DELETE the fact" in refused.json()["error"]["message"]
    assert error_of(client.patch(f"/memory/tasks/{fact['id']}", json={"description": None})) == (422, "invalid_request")
    assert client.delete(f"/memory/facts/{fact['id']}").json()["deleted"]["facts"] == 1
    assert client.get("/memory/facts").json()["facts"] == []
    assert error_of(client.delete(f"/memory/facts/{fact['id']}")) == (404, "not_found")


def test_tasks_can_be_listed_changed_and_deleted(client):
    chat_id = new_chat(client)
    final(say(client, chat_id, "[task] Renew my passport"))
    final(stream(client, "POST", f"/chats/{chat_id}/resume", {"approved": True}))
    (task,) = client.get("/memory/tasks").json()["tasks"]
    done = client.patch(f"/memory/tasks/{task['id']}", json={"status": "done", "due": "Friday"}).json()
    assert done["status"] == "done" and done["completed_at"] and done["due"] == "Friday"
    assert client.get("/memory/tasks", params={"include_done": False}).json()["tasks"] == []
    reopened = client.patch(f"/memory/tasks/{task['id']}", json={"status": "open", "due": None}).json()
    assert reopened["completed_at"] is None and reopened["due"] is None
    assert error_of(client.patch(f"/memory/tasks/{task['id']}", json={"status": "someday"})) == (422, "invalid_request")
    assert error_of(client.patch("/memory/tasks/nope", json={"status": "done"})) == (404, "not_found")
    assert client.delete(f"/memory/tasks/{task['id']}").json()["deleted"]["tasks"] == 1
    assert client.get("/memory/tasks").json()["tasks"] == []


def test_deleting_a_fact_forgets_it_in_the_profile_the_replies_and_the_transcript_marks_it(client):
    """Issue 26: DELETE of "Lives in Coimbra" answered 200, the profile kept the city and the next reply said it."""
    chat_id = new_chat(client)
    final(say(client, chat_id, "My name is Rosa, I live in Coimbra and I work as a nurse"))
    sources = client.get("/memory/sources").json()
    assert sources["profile.location"][0]["described"].startswith("from your message of ")
    fact = next(f for f in client.get("/memory/facts").json()["facts"] if f["text"] == "Lives in Coimbra")
    assert fact["sources"][0]["message_id"]

    deleted = client.delete(f"/memory/facts/{fact['id']}").json()["deleted"]
    assert deleted["facts"] == 1 and deleted["fields"] == 1 and deleted["messages"] >= 1
    assert client.get("/memory/profile").json()["location"] is None
    assert client.get("/memory/profile").json()["name"] == "Rosa"  # what was not forgotten is kept
    for chat in (chat_id, new_chat(client)):
        reply = final(say(client, chat, "What do you know about me?")).data["reply"]
        assert "Coimbra" not in reply and "Rosa" in reply
    messages = client.get(f"/chats/{chat_id}").json()["messages"]
    said = next(m for m in messages if m["role"] == "user" and "Coimbra" in m["content"])
    assert said["forgotten"] is True  # the transcript keeps it as written, marked
    assert client.get("/memory/forgotten").json()["forgotten"][0]["kind"] == "facts"

    assert client.delete(f"/chats/{chat_id}/messages/{said['id']}").json() == {"deleted": {"messages": 1}}
    after = client.get(f"/chats/{chat_id}").json()["messages"]
    assert next(m for m in after if m["id"] == said["id"])["content"] == "[deleted]"
    # Deleting it again deletes nothing more, and says so (it reported a deletion again).
    assert client.delete(f"/chats/{chat_id}/messages/{said['id']}").json() == {"deleted": {"messages": 0}}
    # A reply that quoted it is another message: it stays, marked forgotten, never shown to a model.
    assert all(m["forgotten"] for m in after if "Coimbra" in m["content"])
    assert final(say(client, chat_id, "Thanks")).name == "done"  # the deletion held the chat only while it worked
    assert error_of(client.delete(f"/chats/{new_chat(client)}/messages/nope")) == (404, "not_found")  # an idle chat


def test_forget_by_words_reaches_profile_and_facts_and_says_404_for_nothing(client):
    chat_id = new_chat(client)
    final(say(client, chat_id, "My name is Rosa, I live in Coimbra and I work as a nurse"))
    deleted = client.post("/memory/forget", json={"text": "that I work as a nurse"}).json()["deleted"]
    assert deleted["facts"] == 1 and deleted["fields"] == 1
    assert client.get("/memory/profile").json()["role"] is None
    assert error_of(client.post("/memory/forget", json={"text": "astronomy"})) == (404, "not_found")
    assert client.delete("/memory/profile/location").json()["deleted"]["fields"] == 1
    assert error_of(client.delete("/memory/profile/shoe_size")) == (404, "not_found")


def invalid_item_counts(server) -> dict[str, float]:
    """memory_agent_invalid_items_total by kind, summed over the workers."""
    counts: dict[str, float] = {}
    for line in server.client().get("/metrics").text.splitlines():
        match = re.match(r'memory_agent_invalid_items_total\{kind="(\w+)"\} (\S+)', line)
        if match:
            counts[match.group(1)] = float(match.group(2))
    return counts


async def test_invalid_items_written_through_the_store_never_break_a_turn_and_are_listed_counted_and_deletable(server, client, account, minilm):
    """Items a client wrote into its own namespaces through the store API, that do not match the schema."""
    from core.namespaces import facts_ns, profile_ns, tasks_ns
    from memory.backend import open_memory

    user, _ = account
    bad_fact = {"text": "x", "status": "active"}
    async with open_memory(server.database_url, minilm) as backend:
        await backend.store.aput(facts_ns(user), "poison-fact", bad_fact)
        await backend.store.aput(tasks_ns(user), "poison-task", {"description": "water the plants", "status": "someday"})
        await backend.store.aput(profile_ns(user), "profile", {"profile": {"name": ["not", "a", "name"]}}, index=False)
    before = invalid_item_counts(server)

    chat_id = new_chat(client)
    assert final(say(client, chat_id, "I have a dog named Rex")).name == "done"

    facts = client.get("/memory/facts").json()
    assert [f["text"] for f in facts["facts"]] == ["Has a dog named Rex"]
    (bad,) = facts["invalid"]
    assert (bad["kind"], bad["key"], bad["value"]) == ("facts", "poison-fact", bad_fact) and "id: Field required" in bad["error"]
    assert error_of(client.patch("/memory/facts/poison-fact", json={"text": "y"})) == (409, "invalid_item")
    assert client.delete("/memory/facts/poison-fact").json() == {"deleted": {"facts": 1}}
    assert client.get("/memory/facts").json()["invalid"] == []

    tasks = client.get("/memory/tasks").json()
    assert tasks["tasks"] == [] and [t["key"] for t in tasks["invalid"]] == ["poison-task"]
    assert client.delete("/memory/tasks/poison-task").json() == {"deleted": {"tasks": 1}}

    assert client.get("/memory/profile").json()["name"] is None  # the invalid document reads as empty
    (profile,) = client.get("/memory/invalid").json()["invalid"]
    assert (profile["kind"], profile["key"]) == ("profile", "profile") and "profile.name" in profile["error"]
    assert client.delete("/memory/invalid/profile/profile").json() == {"deleted": {"profile": 1}}
    assert error_of(client.delete("/memory/invalid/profile/profile")) == (404, "not_found")
    valid_id = client.get("/memory/facts").json()["facts"][0]["id"]
    assert error_of(client.delete(f"/memory/invalid/facts/{valid_id}")) == (409, "item_is_valid")
    assert client.get("/memory/invalid").json() == {"invalid": []}

    after = invalid_item_counts(server)
    for kind in ("facts", "tasks", "profile"):
        assert after.get(kind, 0) >= before.get(kind, 0) + 1, (kind, before, after)


# --------------------------------------------------------------------------- deleting
def test_deleting_a_chat_removes_its_checkpoints_and_record(server, client):
    chat_id = new_chat(client)
    say(client, chat_id, "I have a dog named Rex")
    assert all(n > 0 for n in checkpoint_counts(server.database_url, chat_id)[:1])
    assert client.delete(f"/chats/{chat_id}").json() == {"deleted": {"chats": 1}}
    assert checkpoint_counts(server.database_url, chat_id) == (0, 0, 0)
    assert db_rows(server.database_url, "SELECT count(*) FROM store WHERE key = %s", (chat_id,)) == [(0,)]
    assert error_of(client.get(f"/chats/{chat_id}")) == (404, "not_found")
    assert client.get("/chats").json()["chats"] == []
    assert [f["text"] for f in client.get("/memory/facts").json()["facts"]] == ["Has a dog named Rex"]  # memory stays


def rows_mentioning(database_url: str, needles: list[str]) -> dict[str, int]:
    """Rows of every table in the public schema whose text form contains any needle."""
    found = {}
    with psycopg.connect(database_url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "store_vectors", "memory_agent_api_keys", "memory_agent_runs"} <= set(tables)
        for table in tables:
            count = conn.execute(
                f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE ANY(%s)', ([f"%{n}%" for n in needles],)
            ).fetchone()[0]
            if count:
                found[table] = count
    return found


async def test_forget_me_leaves_no_row_of_the_user_in_any_table(server, account, stranger):
    user, key = account
    with server.client(key) as c:
        chats = [new_chat(c, persona=p) for p in ("assistant", "planner")]
        say(c, chats[0], "My name is Dana, I live in Haifa and I have a dog named Rex")
        final(say(c, chats[1], "[task] Book the vet"))
        final(stream(c, "POST", f"/chats/{chats[1]}/resume", {"approved": True}))
        final(say(c, chats[1], "[task] Buy dog food"))  # left waiting for a confirmation
        for i in range(16):  # long enough to be summarized
            say(c, chats[0], f"Reminder {i}: Rex needs his walk at {i} o'clock")
        c.post(f"/chats/{chats[0]}/stop")
    with server.client(stranger[1]) as other:
        other_chat = new_chat(other)
        say(other, other_chat, "I have a cat named Tom")

    # Per-user and per-thread rows exist in the checkpoint tables and the store before.
    before = rows_mentioning(server.database_url, [user, *chats])
    assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "memory_agent_api_keys", "memory_agent_runs", "memory_agent_thread_owners"} <= set(before), before
    vectors_before = db_rows(server.database_url, "SELECT count(*) FROM store_vectors WHERE prefix LIKE %s", (f"users.{user}.%",))[0][0]
    assert vectors_before > 0

    with server.client(key) as c:
        response = c.delete("/me")
        assert response.status_code == 200
        deleted = response.json()["deleted"]
        assert deleted["chats"] == 2 and deleted["memories"] > 0 and deleted["api_keys"] == 1
        assert error_of(c.get("/me")) == (401, "unauthorized")  # the key went with everything else

    # Only the marker that refuses requests authenticated before the forget: the user id and a count.
    assert rows_mentioning(server.database_url, [user, *chats]) == {"memory_agent_owner_forgets": 1}
    assert db_rows(server.database_url, "SELECT owner, generation FROM memory_agent_owner_forgets WHERE owner = %s", (user,)) == [(user, 2)]
    assert db_rows(server.database_url, "SELECT count(*) FROM store_vectors WHERE prefix LIKE %s", (f"users.{user}.%",)) == [(0,)]
    with server.client(stranger[1]) as other:  # nobody else lost anything
        assert len(other.get(f"/chats/{other_chat}").json()["messages"]) == 2
        assert [f["text"] for f in other.get("/memory/facts").json()["facts"]] == ["Has a cat named Tom"]


# --------------------------------------------------------------------------- metrics
def test_metrics_report_turns_latency_tokens_and_memories_in_prometheus_format(server, client):
    chat_id = new_chat(client)
    say(client, chat_id, "I have a dog named Rex")
    text = server.client().get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    body = text.text
    for name in (
        "memory_agent_turns_total",
        'memory_agent_node_seconds_bucket{le="0.005",node="reply"}',
        'memory_agent_tokens_in_total{purpose="reply"}',
        'memory_agent_tokens_out_total{purpose="reply"}',
        'memory_agent_memories_written_total{kind="facts_added"}',
        "memory_agent_extraction_failures_total",
        'memory_agent_api_runs_total{kind="message",outcome="finished"}',
    ):
        assert name in body, name


# --------------------------------------------------------------------------- runs that outlive their request or their worker
def test_a_client_that_disconnects_mid_stream_does_not_stop_the_reply(server, account):
    user, key = account
    with server.client(key) as c:
        chat_id = new_chat(c)
        with c.stream("POST", f"/chats/{chat_id}/messages", json={"text": "[slow] I have a dog named Rex"}) as response:
            for line in response.iter_lines():
                if line.startswith("event: token"):
                    break  # hang up after the first token
    run = db_rows(server.database_url, "SELECT run_id FROM memory_agent_runs WHERE thread_id = %s", (chat_id,))[0][0]
    with server.client(key) as c:
        for _ in range(300):  # the reply goes on in its worker
            if not c.get(f"/chats/{chat_id}").json()["running"]:
                break
            time.sleep(0.1)
        detail = c.get(f"/chats/{chat_id}").json()
        assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]
        assert detail["messages"][1]["content"].startswith("(offline model)")
        assert [f["text"] for f in c.get("/memory/facts").json()["facts"]] == ["Has a dog named Rex"]
    assert db_rows(server.database_url, "SELECT status FROM memory_agent_runs WHERE run_id = %s", (run,)) == [("finished",)]


async def test_a_live_workers_run_blocks_the_chat_and_a_dead_workers_half_reply_is_taken_back(server, client, account, minilm):
    from langchain_core.messages import HumanMessage

    from graph.assembly import compile_graph
    from core.context import Context
    from llm.chat_model import register_model, unregister_model
    from offline_model.slow_model import SlowOfflineChatModel
    from memory.backend import open_memory

    user, _ = account
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    before = client.get(f"/chats/{chat_id}").json()["messages"]
    (head,) = db_rows(server.database_url, "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = %s", (chat_id,))[0]
    counts = checkpoint_counts(server.database_url, chat_id)

    # A worker dies in the middle of a reply: its run row stays "running" and the thread
    # holds the start of the turn (the user message, paused before the reply).
    register_model("slow-here", SlowOfflineChatModel(delay_ms=200))
    try:
        async with open_memory(server.database_url, minilm) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)

            replying = asyncio.Event()

            async def reply():
                async for _ in graph.astream(
                    {"messages": [HumanMessage("I live in Rome")]},
                    {"configurable": {"thread_id": chat_id}},
                    context=Context(user_id=user, model="slow-here"),
                    stream_mode=["messages"],
                ):
                    replying.set()

            task = asyncio.create_task(reply())
            # Killed mid-reply, once its first words streamed (a fixed 1.5 s fell before the turn's
            # first checkpoint on a loaded machine).
            await asyncio.wait_for(replying.wait(), 60)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.sleep(0.5)  # (its late writes land)
    finally:
        unregister_model("slow-here")
    insert = (
        "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker, heartbeat_at, head_recorded, head_checkpoint) "
        "VALUES (gen_random_uuid(), %s, %s, 'message', 'running', 'elsewhere:1', now() - make_interval(secs => %s), true, %s)"
    )
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute(insert, (chat_id, user, 1, head))  # its worker is alive (a fresh heartbeat)
    assert [m["content"] for m in client.get(f"/chats/{chat_id}").json()["messages"]][-1] == "I live in Rome"
    assert error_of(client.post(f"/chats/{chat_id}/messages", json={"text": "hello"})) == (409, "reply_in_progress")

    with psycopg.connect(server.database_url, autocommit=True) as conn:  # now it stops answering
        conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - interval '1 minute' WHERE thread_id = %s", (chat_id,))
    assert checkpoint_counts(server.database_url, chat_id) != counts
    done = final(say(client, chat_id, "hello"))
    assert done.name == "done"
    after = client.get(f"/chats/{chat_id}").json()["messages"]
    assert after[:2] == before and [m["content"] for m in after[2:3]] == ["hello"] and len(after) == 4  # no trace of Rome
    assert client.get("/memory/profile").json()["location"] is None
    # A live worker took the dead run over (a recover run held the chat meanwhile); this one recorded
    # no turn to keep, so it was taken back whole.
    statuses = db_rows(server.database_url, "SELECT worker, kind, status FROM memory_agent_runs WHERE thread_id = %s ORDER BY started_at", (chat_id,))
    assert [s[1:] for s in statuses[-3:]] == [("message", "abandoned"), ("recover", "stopped"), ("message", "finished")]
    assert statuses[-3][0] == "elsewhere:1"


async def test_a_turn_left_before_its_memory_update_is_completed_by_the_next_message(server, client, account, minilm):
    """A worker that died between reply and memory update leaves the thread paused at the commit point."""
    user, _ = account
    chat_id = new_chat(client)
    await turn_paused_at_commit_point(server.database_url, minilm, user, chat_id)
    assert len(client.get(f"/chats/{chat_id}").json()["messages"]) == 2
    assert client.get("/memory/facts").json()["facts"] == []

    assert final(say(client, chat_id, "hello again")).name == "done"
    assert [f["text"] for f in client.get("/memory/facts").json()["facts"]] == ["Has a dog named Rex"]
    assert len(client.get(f"/chats/{chat_id}").json()["messages"]) == 4


def test_with_auth_off_every_caller_is_the_local_user(new_database):
    live = start_server(new_database("noauth"), workers=1, env={"MEMORY_AGENT_AUTH": "off"})
    try:
        assert "Auth is off" in live.log() and live.local_key is None
        with live.client() as anyone:
            assert anyone.get("/me").json() == {"user_id": "local", "auth": "off"}
            chat_id = new_chat(anyone)
            assert final(say(anyone, chat_id, "My name is Dana")).name == "done"
            assert anyone.get("/memory/profile", headers={"Authorization": "Bearer whatever"}).json()["name"] == "Dana"
    finally:
        live.stop()


def test_a_stored_value_that_is_not_a_json_object_is_listed_as_invalid_and_can_be_deleted(server, account, client):
    user, _ = account
    # Written straight into the store table (the store's own API only writes objects).
    with psycopg.connect(server.database_url) as conn:
        for namespace, key, value in (("facts", "list-fact", ["a", "list"]), ("tasks", "text-task", "just text"), ("profile", "profile", [1, 2])):
            conn.execute(
                "INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s)",
                (f"users.{user}.{namespace}", key, psycopg.types.json.Jsonb(value)),
            )

    facts = client.get("/memory/facts")
    assert facts.status_code == 200, facts.text
    (bad,) = facts.json()["invalid"]
    assert (bad["key"], bad["value"]) == ("list-fact", ["a", "list"]) and "not an object" in bad["error"]
    tasks = client.get("/memory/tasks")
    assert tasks.status_code == 200 and [(t["key"], t["value"]) for t in tasks.json()["invalid"]] == [("text-task", "just text")]
    listed = client.get("/memory/invalid")
    assert listed.status_code == 200, listed.text
    assert {(i["kind"], i["key"]) for i in listed.json()["invalid"]} == {("facts", "list-fact"), ("tasks", "text-task"), ("profile", "profile")}
    assert client.get("/memory/profile").status_code == 200  # reads as empty

    assert client.delete("/memory/facts/list-fact").json() == {"deleted": {"facts": 1}}
    assert client.delete("/memory/tasks/text-task").json() == {"deleted": {"tasks": 1}}
    assert client.delete("/memory/invalid/profile/profile").json() == {"deleted": {"profile": 1}}
    assert client.get("/memory/invalid").json() == {"invalid": []}
