"""POST /chats/import on a live server (`memory-agent serve`, real Postgres, offline model):
the new chat is the caller's, bad input is a 422 that creates nothing, the route has its own body limit."""

from __future__ import annotations

import json

import pytest

from tests.support.http_server import PACED_CUE, live_server_fixture, new_account
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


# --------------------------------------------------------------------------- issue 31: imports that race, die and flood
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.support.http_server import create_keys  # noqa: E402


def long_history(n: int = 80, paced_from: int | None = None) -> dict:
    """``paced_from``: the messages from there on hold the test model's ``[paced]`` cue, so that each
    of their exchanges lasts at least a quarter second however fast the machine."""
    return {
        "title": "A long history",
        "messages": [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "text": f"Message {i} about my garden and the tomatoes {i}." + (f" {PACED_CUE}" if paced_from is not None and i >= paced_from else ""),
                "time": f"2024-02-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00Z",
            }
            for i in range(n)
        ],
    }


class BackgroundImport:
    """POST /chats/import in a thread (it answers only once the import ends)."""

    def __init__(self, server, key: str, body: dict, params: dict | None = None) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(server, key, body, params), daemon=True)
        self._thread.start()

    def _run(self, server, key, body, params) -> None:
        try:
            with server.client(key, timeout=600) as client:
                self.response = client.post("/chats/import", json=body, params=params)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 120) -> httpx.Response:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the import did not answer"
        if self.error:
            raise self.error
        return self.response


def wait_for_chat(client: httpx.Client, at_least: int = 2, state: str | None = None, tries: int = 1500) -> dict:
    """The caller's one chat, once it holds ``at_least`` messages (and its import is in ``state``)."""
    for _ in range(tries):
        chats = client.get("/chats").json()["chats"]
        if chats and chats[0]["message_count"] >= at_least and (state is None or (chats[0].get("import_state") or {}).get("state") == state):
            return chats[0]
        time.sleep(0.2)
    raise AssertionError(f"no chat with {at_least} messages (state {state}) appeared: {chats}")


def rows_left(database_url: str, thread_id: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (thread_id,)).fetchone()[0]
            for table in ("checkpoints", "checkpoint_writes", "memory_agent_thread_owners", "memory_agent_episodes")
        }


def test_a_chat_being_imported_takes_no_message_and_deleting_it_stops_the_import_for_good(server, owner):
    importing = BackgroundImport(server, owner[1], long_history(paced_from=2))  # still importing on a fast machine
    with server.client(owner[1]) as client:
        chat = wait_for_chat(client)
        refused = client.post(f"/chats/{chat['id']}/messages", json={"text": "Hello in the middle of the import"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "import_in_progress"
        assert client.delete(f"/chats/{chat['id']}").status_code == 200
        answered = importing.join()
        assert answered.status_code == 409 and answered.json()["error"]["code"] == "import_cancelled", answered.text
        assert client.get(f"/chats/{chat['id']}").status_code == 404
        assert client.get("/chats").json()["chats"] == []
    assert set(rows_left(server.database_url, chat["id"]).values()) == {0}


async def test_forget_me_during_an_import_wins_and_a_new_key_for_the_same_user_finds_nothing(server, owner):
    user, key = owner
    importing = BackgroundImport(server, key, long_history(paced_from=2))
    with server.client(key) as client:
        chat = wait_for_chat(client)
        assert client.delete("/me").status_code == 200
    answered = importing.join()
    assert answered.status_code in (401, 409), answered.text  # cancelled (or its key is gone)
    assert set(rows_left(server.database_url, chat["id"]).values()) == {0}
    again = (await create_keys(server.database_url, [user]))[user]
    with server.client(again) as client:
        assert client.get("/chats").json()["chats"] == []
        assert client.get("/memory/facts").json().get("facts", []) == []


def test_forget_me_while_an_imports_body_arrives_refuses_the_import_with_410_and_nothing_comes_back(server, owner):
    """The key is checked before the body is read; forget-me lands while the body is still coming."""
    user, key = owner
    body = json.dumps({**HISTORY, "title": "Works as a nurse"}).encode()
    sent_head, forgotten = threading.Event(), threading.Event()

    def slowly():
        yield body[:10]
        sent_head.set()
        assert forgotten.wait(30)  # DELETE /me answers meanwhile (well within the body's idle deadline)
        yield body[10:]

    answered: dict = {}

    def post() -> None:
        with server.client(key, timeout=120) as client:
            answered["r"] = client.post("/chats/import", content=slowly(), headers={"Content-Type": "application/json"})

    importing = threading.Thread(target=post, daemon=True)
    importing.start()
    try:
        assert sent_head.wait(30)
        time.sleep(0.5)  # the server authenticates the request and waits for the rest of its body
        with server.client(key) as client:
            assert client.delete("/me").status_code == 200
    finally:
        forgotten.set()
    importing.join(120)
    response = answered["r"]
    # 410: authenticated before the forget, refused after it (401 only if the forget came before the key was checked)
    assert response.status_code in (410, 401), response.text
    assert response.status_code == 401 or response.json()["error"]["code"] == "user_forgotten"
    with psycopg.connect(server.database_url) as conn:
        left = {
            table: conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", (value,)).fetchone()[0]
            for table, column, value in (
                ("memory_agent_thread_owners", "owner", user),
                ("memory_agent_imports", "owner", user),
                ("memory_agent_episodes", "owner", user),
                ("store", "split_part(prefix, '.', 2)", user),
            )
        }
    assert set(left.values()) == {0}, left


def test_a_client_that_leaves_stops_the_import_which_is_listed_incomplete_and_resumes(server, owner):
    # Paced past the fourth message: the server sees the client gone at its next beat (half a
    # second), and a fast machine imported the rest of an unpaced history before that.
    history = long_history(40, paced_from=4)
    body = json.dumps(history).encode()
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /chats/import HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {owner[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock, server.client(owner[1]) as client:
        sock.sendall(head + body)
        chat = wait_for_chat(client, at_least=4)
    # The connection is closed: the import stops within a beat and its chat is marked.
    with server.client(owner[1], timeout=600) as client:
        stopped = wait_for_chat(client, at_least=1, state="incomplete", tries=300)
        assert stopped["import_state"]["imported"] < 40 and stopped["import_state"]["total"] == 40
        time.sleep(1.5)  # (a running import would have moved on by now)
        assert client.get("/chats").json()["chats"][0]["message_count"] == stopped["message_count"]
        detail = client.get(f"/chats/{chat['id']}").json()
        assert detail["chat"]["import_state"]["state"] == "incomplete"
        resumed = client.post("/chats/import", params={"resume": chat["id"]}, content=body, headers={"Content-Type": "application/json"})
        assert resumed.status_code == 201, resumed.text
        assert [m["content"] for m in resumed.json()["messages"]] == [m["text"] for m in history["messages"]]
        assert resumed.json()["chat"]["import_state"] is None


def test_an_import_without_a_key_is_refused_before_its_body_is_read(server):
    host, port = server.url.removeprefix("http://").split(":")
    head = f"POST /chats/import HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{".encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        sock.settimeout(1.0)
        received = b""
        for _ in range(8):  # a byte a second for 8 s at most; the answer must not wait for the body
            try:
                piece = sock.recv(4096)
            except socket.timeout:
                sock.sendall(b" ")
                continue
            if not piece:
                break
            received += piece
    assert received.startswith(b"HTTP/1.1 401"), received[:200]


@pytest.mark.parametrize(
    "body, code",
    [
        ({"messages": [{"role": "user", "text": "hi", "time": "9999-12-31T23:59:59-23:59"}]}, "invalid_import"),
        ({"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": "hello"}}, "invalid_import"),
        ({"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": {"x": 1}}}, "invalid_import"),
        (long_history(5_001), "import_too_large"),
    ],
)
def test_bad_or_oversized_histories_are_a_clear_4xx_and_create_nothing(server, owner, body, code):
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=body)
        assert 400 <= response.status_code < 500, response.text
        assert response.json()["error"]["code"] == code
        assert client.get("/chats").json()["chats"] == []
