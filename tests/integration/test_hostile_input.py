"""Hostile and malformed input on a live server (`memory-agent serve` on a real Postgres).

Text that cannot be stored (a NUL, a lone surrogate) or is too long is refused with 422 and
says why, wherever it comes in: body fields and path ids. Bodies are counted as they arrive
and refused with 413 the moment they pass the limit, before authentication and parsing.
"""

from __future__ import annotations

import socket
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from app.http.body_limit import MAX_BODY_BYTES
from tests.support.embedded_postgres import throwaway_postgres
from tests.support.http_server import create_keys, new_chat, new_user, start_server, stream

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess

NUL = "a\x00b"
NUL_ID = "a%00b"  # the same, in a path (a client percent-encodes it; the server decodes it)


@pytest.fixture(scope="module")
def server(new_database):
    live = start_server(new_database("hostile"), workers=1)
    yield live
    live.stop()


@pytest.fixture
async def client(server):
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    with server.client(key) as c:
        yield c


def refused(response, *, mentions: str) -> str:
    """The 422 error message, after checking the error's shape and that it says what is wrong."""
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and mentions in error["message"], error
    return error["message"]


def learned_fact(client) -> dict:
    chat_id = new_chat(client)
    stream(client, "POST", f"/chats/{chat_id}/messages", {"text": "I have a dog named Rex"})
    (fact,) = client.get("/memory/facts").json()["facts"]
    return fact


# --------------------------------------------------------------------------- the eight inputs that answered 500
def test_a_nul_in_a_chat_id_is_422(client):
    for method, path in (("GET", "/chats/{}"), ("DELETE", "/chats/{}"), ("POST", "/chats/{}/stop")):
        message = refused(client.request(method, path.format(NUL_ID)), mentions="NUL character")
        assert "chat_id" in message


def test_a_nul_in_a_fact_id_is_422(client):
    refused(client.patch(f"/memory/facts/{NUL_ID}", json={"importance": "high"}), mentions="NUL character")
    refused(client.delete(f"/memory/facts/{NUL_ID}"), mentions="NUL character")


def test_a_nul_in_a_task_id_is_422(client):
    refused(client.patch(f"/memory/tasks/{NUL_ID}", json={"status": "done"}), mentions="NUL character")
    refused(client.delete(f"/memory/tasks/{NUL_ID}"), mentions="NUL character")


def test_a_nul_in_a_chat_title_is_422_and_no_chat_is_created(client):
    message = refused(client.post("/chats", json={"title": NUL}), mentions="NUL character (position 1)")
    assert "title" in message
    assert client.get("/chats").json()["chats"] == []


def test_a_nul_in_a_new_title_of_a_chat_is_422_and_the_title_is_unchanged(client):
    chat_id = new_chat(client, title="Kept")
    refused(client.patch(f"/chats/{chat_id}", json={"title": NUL}), mentions="NUL character")
    assert client.get(f"/chats/{chat_id}").json()["chat"]["title"] == "Kept"


def test_a_nul_in_the_key_of_an_invalid_item_or_of_a_reply_to_regenerate_is_422(client):
    refused(client.delete(f"/memory/invalid/facts/{NUL_ID}"), mentions="NUL character")
    chat_id = new_chat(client)
    refused(client.post(f"/chats/{chat_id}/messages/{NUL_ID}/regenerate"), mentions="NUL character")


def test_a_query_string_that_is_not_utf8_is_422_not_searched_as_a_replacement_character(client):
    """?q=%ff reached the search as U+FFFD and was answered with whatever matched it."""
    for path in ("/chats/search?q=%ff", "/chats/search?q=caf%e9", "/memory/facts?include_superseded=%c3"):
        refused(client.get(path), mentions="not valid UTF-8")
    assert client.get("/chats/search?q=caf%C3%A9").status_code == 200  # é as UTF-8 is text


def test_a_nul_in_a_profile_field_is_422_and_the_profile_is_unchanged(client):
    assert client.patch("/memory/profile", json={"name": "Dana"}).status_code == 200
    refused(client.patch("/memory/profile", json={"name": NUL}), mentions="NUL character")
    refused(client.patch("/memory/profile", json={"goals": ["learn Italian", NUL]}), mentions="NUL character")
    assert client.get("/memory/profile").json()["name"] == "Dana"


def test_a_nul_in_a_preference_is_422(client):
    refused(client.patch("/memory/preferences", json={"tone": NUL}), mentions="NUL character")
    refused(client.patch("/memory/preferences", json={"other_notes": [NUL]}), mentions="NUL character")
    assert client.get("/memory/preferences").json()["tone"] is None


def test_a_nul_in_a_fact_text_is_422_and_the_fact_is_unchanged(client):
    fact = learned_fact(client)
    refused(client.patch(f"/memory/facts/{fact['id']}", json={"text": NUL}), mentions="NUL character")
    refused(client.patch(f"/memory/facts/{fact['id']}", json={"tags": [NUL]}), mentions="NUL character")
    assert client.get("/memory/facts").json()["facts"] == [fact]


def test_a_lone_surrogate_in_the_profile_is_422(client):
    # JSON may spell a lone surrogate as an escape; Python decodes it into a str UTF-8 cannot encode.
    body = b'{"name": "Dana \\ud800"}'
    response = client.patch("/memory/profile", content=body, headers={"content-type": "application/json"})
    refused(response, mentions="lone surrogate (position 5)")
    assert client.get("/memory/profile").json()["name"] is None


def test_nul_in_other_text_is_422_too(client):
    chat_id = new_chat(client)
    refused(client.get("/chats/search", params={"q": NUL}), mentions="NUL character")
    refused(client.put(f"/chats/{chat_id}/messages/{NUL_ID}", json={"text": "hi"}), mentions="NUL character")
    refused(client.post(f"/chats/{chat_id}/resume", json={"approved": True, "interrupt_id": NUL}), mentions="NUL character")
    refused(client.post("/chats", json={"persona": NUL}), mentions="NUL character")


# --------------------------------------------------------------------------- lengths
def test_every_stored_string_and_list_has_a_length_limit(client):
    refused(client.patch("/memory/profile", json={"name": "x" * 201}), mentions="201 characters long; the limit is 200")
    refused(client.patch("/memory/profile", json={"goals": ["g"] * 51}), mentions="51 items; the limit is 50")
    refused(client.patch("/memory/profile", json={"goals": ["g" * 501]}), mentions="the limit is 500")
    refused(client.patch("/memory/preferences", json={"other_notes": ["n"] * 51}), mentions="the limit is 50")
    refused(client.post("/chats", json={"title": "t" * 201}), mentions="the limit is 200")
    refused(client.patch(f"/memory/tasks/{'i' * 201}", json={"status": "done"}), mentions="the limit is 200")
    refused(client.post("/memory/forget", json={"text": "f " * 251}), mentions="502 characters long; the limit is 500")
    fact = learned_fact(client)
    refused(client.patch(f"/memory/facts/{fact['id']}", json={"text": "f" * 2001}), mentions="the limit is 2,000")
    refused(client.patch(f"/memory/facts/{fact['id']}", json={"tags": ["t"] * 21}), mentions="the limit is 20")
    # At the limits, everything is taken.
    assert client.patch("/memory/profile", json={"name": "x" * 200, "goals": ["g" * 500] * 50}).status_code == 200
    assert client.patch(f"/memory/facts/{fact['id']}", json={"text": "f" * 2000}).status_code == 200


async def test_memory_stored_over_a_limit_stays_readable_and_editable(server):
    """Limits check what comes in; a list grown by merges (or written before a limit) must not lock a user out."""
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    goals = [f"goal {n}" for n in range(60)]
    fact = {"id": "f1", "text": "Has many interests", "tags": [f"tag{n}" for n in range(30)], "hash": "h1", "status": "active"}
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO store (prefix, key, value) VALUES (%s, 'profile', %s), (%s, 'f1', %s)",
            (f"users.{user}.profile", Jsonb({"profile": {"name": "x" * 300, "goals": goals}}), f"users.{user}.facts", Jsonb(fact)),
        )
    with server.client(key) as client:
        assert client.get("/memory/profile").json()["goals"] == goals
        patched = client.patch("/memory/profile", json={"name": "Dana"})
        assert patched.status_code == 200 and patched.json()["goals"] == goals and patched.json()["name"] == "Dana"
        assert [len(f["tags"]) for f in client.get("/memory/facts").json()["facts"]] == [30]
        chat_id = new_chat(client)
        assert stream(client, "POST", f"/chats/{chat_id}/messages", {"text": "What do you know about me?"})[-1].name == "done"


# --------------------------------------------------------------------------- the body limit
def raw_request(server, head: str) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(head.encode())
    return sock


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_chunked_body_over_the_limit_is_refused_before_it_is_read_whole_without_a_key(server):
    """No key, no Content-Length: the 413 comes while the client is still sending, a little past the limit."""
    total = 20 * MAX_BODY_BYTES
    piece = b"x" * 64 * 1024
    sock = raw_request(
        server,
        "POST /chats HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    sent, answer = 0, b""
    try:
        while sent < total:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except (BrokenPipeError, ConnectionResetError):
                break  # the server closed the connection after answering
            sent += len(piece)
            sock.settimeout(0.02)  # paces the sending, and looks for an early answer
            try:
                answer = sock.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            break
        sock.settimeout(10)
        answer += read_response(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request_too_large" in answer and b"connection: close" in answer.lower()
    assert sent < total / 4, f"the answer came only after {sent:,} of {total:,} bytes"


def test_a_sized_body_over_the_limit_is_refused_before_any_of_it_is_sent(server):
    sock = raw_request(
        server,
        f"POST /chats HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {50 * MAX_BODY_BYTES}\r\n\r\n",
    )
    try:
        answer = read_response(sock)  # no body byte was sent: the answer cannot have waited for it
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer


def test_a_chunked_body_within_the_limit_is_handled_as_usual(client):
    def pieces():
        yield b'{"title": "Sent in '
        time.sleep(0.05)
        yield b'pieces"}'

    response = client.post("/chats", content=pieces(), headers={"content-type": "application/json"})
    assert response.status_code == 201 and response.json()["chat"]["title"] == "Sent in pieces"
    assert response.request.headers["transfer-encoding"] == "chunked"


# --------------------------------------------------------------------------- the page, health and metrics
def test_the_page_runs_only_its_own_scripts_and_may_not_be_framed_by_another_site(server):
    response = server.client().get("/")
    assert response.status_code == 200
    policy = {d.strip().split()[0]: d.strip().split()[1:] for d in response.headers["content-security-policy"].split(";")}
    assert policy["default-src"] == ["'self'"] and policy["script-src"] == ["'self'"], policy
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"], policy
    assert policy["frame-ancestors"] == ["'none'"], policy
    assert response.headers["x-frame-options"] == "DENY"


def test_metrics_list_every_kind_of_summary_and_extraction_failure(server):
    body = server.client().get("/metrics").text
    for metric in ("memory_agent_extraction_failures_total", "memory_agent_summary_failures_total"):
        for kind in ("invalid_output", "provider", "database", "internal"):
            assert f'{metric}{{kind="{kind}"}}' in body, (metric, kind)


def test_healthz_says_what_is_wrong_without_the_exception_text():
    with throwaway_postgres("ma-hz-") as pg:
        live = start_server(pg.get_uri(), workers=1)
        try:
            assert live.client().get("/healthz").json()["database"] == "ok"
            from pgserver._commands import pg_ctl

            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pg.pgdata, user=pg.system_user)  # the database goes away under the server
            response = live.client(timeout=30).get("/healthz")
            assert response.status_code == 503
            body = response.json()
            assert body["status"] == "unavailable"
            assert body["database"] in (
                "no database connection within 5 s: the database is down or every connection is busy",
                "the database refused or dropped the connection",
            ), body
            assert str(pg.pgdata) not in response.text and "psycopg" not in response.text.lower()
        finally:
            live.stop()
