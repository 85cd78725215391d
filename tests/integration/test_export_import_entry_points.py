"""A ChatGPT or Claude ``conversations.json`` through both entry points: ``POST /chats/import`` on a
live server and ``memory-agent import`` as a process, each answering as docs/import.md says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.http_server import live_server_fixture, new_account

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess, CLI processes

EXPORTS = REPO_ROOT / "tests" / "fixtures" / "exports"
CHATGPT = EXPORTS / "chatgpt_conversations.json"
CLAUDE = EXPORTS / "claude_conversations.json"

server = live_server_fixture("httpexports", workers=1)


@pytest.fixture
async def owner(server):
    return await new_account(server)


def test_an_export_posted_to_chats_import_becomes_chats_and_a_second_post_adds_nothing(server, owner):
    export = json.loads(CHATGPT.read_text())
    with server.client(owner[1]) as client:
        first = client.post("/chats/import", json=export)
        assert first.status_code == 201, first.text
        chats = first.json()["chats"]
        assert [c["chat"]["title"] for c in chats] == ["Moving to Lisbon", "Sourdough starter smell", "Birthday gift for Tomás"]
        assert [c["imported_messages"] for c in chats] == [4, 4, 4] and not any(c["already_imported"] for c in chats)
        assert chats[0]["chat"]["created_at"].startswith("2024-03-02T08:59:54")
        assert chats[0]["chat"]["last_activity"].startswith("2024-03-02T09:14:11")

        again = client.post("/chats/import", json=export)
        assert again.status_code == 200, again.text
        assert [c["chat"]["id"] for c in again.json()["chats"]] == [c["chat"]["id"] for c in chats]
        assert all(c["already_imported"] and c["imported_messages"] == 0 for c in again.json()["chats"])
        assert len(client.get("/chats").json()["chats"]) == 3

        claude = client.post("/chats/import", json=json.loads(CLAUDE.read_text()))
        assert claude.status_code == 201, claude.text
        assert len(claude.json()["chats"]) == 3  # the empty conversation is left out
        detail = client.get(f"/chats/{claude.json()['chats'][1]['chat']['id']}").json()
        assert detail["messages"][0]["content"].startswith("I started cello lessons with Ms. Okafor")


def test_an_export_with_a_bad_conversation_is_422_naming_it_and_creates_nothing(server, owner):
    export = json.loads(CLAUDE.read_text())
    export[1]["chat_messages"][0]["text"] = export[1]["chat_messages"][0]["content"][0]["text"] = "bad \x00 text"
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=export)
        assert response.status_code == 422, response.text
        message = response.json()["error"]["message"]
        assert "'Cello practice routine'" in message and "NUL" in message
        assert client.get("/chats").json()["chats"] == []


def chatgpt_conversation(cid: str, title: str, t0: float, n: int = 2) -> dict:
    mapping, parent = {}, None
    for i in range(n):
        mapping[f"n{i}"] = {"id": f"n{i}", "message": {"id": f"m{i}", "author": {"role": "user" if i % 2 == 0 else "assistant"},
                            "content": {"content_type": "text", "parts": [f"I work as a baker, line {i}"]}, "create_time": t0 + i},
                            "parent": parent, "children": []}  # fmt: skip
        if parent:
            mapping[parent]["children"].append(f"n{i}")
        parent = f"n{i}"
    return {"id": cid, "title": title, "create_time": t0, "current_node": parent, "mapping": mapping}


def test_an_export_whose_later_conversation_cannot_be_stored_creates_nothing_and_one_too_long_is_413(server, owner):
    good = chatgpt_conversation("good-one", "Good", 1700000000)
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=[good, chatgpt_conversation("bad\x00two", "Bad", 1700001000)])  # a NUL in its id
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_import" and "'Bad'" in error["message"] and "NUL" in error["message"], error
        assert client.get("/chats").json()["chats"] == []  # not even the good conversation's chat

        response = client.post("/chats/import", json=[good, chatgpt_conversation("big", "Big", 1700002000, 5_001)])
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "import_too_large" and "'Big'" in response.json()["error"]["message"]
        assert client.get("/chats").json()["chats"] == []


def run_import(path: Path, database_url: str, user: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL")}
    env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "import", str(path), "--user", user, "--model", "offline"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=600,
    )  # fmt: skip


def test_memory_agent_import_takes_an_export_and_says_what_it_did_each_time(new_database):
    database_url, user = new_database("cliexports"), f"u{uuid.uuid4().hex[:10]}"
    first = run_import(CLAUDE, database_url, user)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("Imported ") for line in lines)
    assert '"Planning an October trip to Kyoto"' in lines[0] and "2024-05-04 to 2024-05-04" in lines[0]

    again = run_import(CLAUDE, database_url, user)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("Already imported: ") and line.endswith("nothing added.") for line in lines)


def claude_conversation(messages: int | None = None) -> list[dict]:
    """The Claude export's first conversation (4 messages), or as an earlier export held it: its first ``messages``."""
    conversation = json.loads(CLAUDE.read_text())[0]
    conversation["chat_messages"] = conversation["chat_messages"][:messages]
    return [conversation]


def test_a_conversation_posted_again_after_it_grew_gets_its_new_messages_on_its_chat(server, owner):
    with server.client(owner[1]) as client:
        first = client.post("/chats/import", json=claude_conversation(2))
        assert first.status_code == 201, first.text
        chat_id = first.json()["chats"][0]["chat"]["id"]

        grown = client.post("/chats/import", json=claude_conversation())
        assert grown.status_code == 200, grown.text  # no chat was created
        [out] = grown.json()["chats"]
        assert out["chat"]["id"] == chat_id and out["grown"] and out["imported_messages"] == 2
        assert not out["already_imported"] and out["not_added"] is None
        assert [m["content"][:20] for m in client.get(f"/chats/{chat_id}").json()["messages"]] == [
            m["text"][:20] for m in claude_conversation()[0]["chat_messages"]
        ]
        assert len(client.get("/chats").json()["chats"]) == 1


def test_memory_agent_import_says_how_many_new_messages_a_grown_conversation_added(new_database, tmp_path):
    database_url, user = new_database("cligrown"), f"u{uuid.uuid4().hex[:10]}"
    (tmp_path / "before.json").write_text(json.dumps(claude_conversation(2)))
    (tmp_path / "after.json").write_text(json.dumps(claude_conversation()))
    assert run_import(tmp_path / "before.json", database_url, user).returncode == 0

    grown = run_import(tmp_path / "after.json", database_url, user)

    assert grown.returncode == 0, grown.stderr
    [line] = grown.stdout.strip().splitlines()
    assert line.startswith('Added 2 new messages (1 exchanges, 2024-05-04 to 2024-05-04) to chat ') and line.endswith("which held its first 2.")


def test_a_history_of_ours_posted_again_with_an_edited_message_is_409_saying_which(server, owner):
    def history(texts: list[str]) -> dict:
        return {"title": "Trails", "source_id": "trails-1", "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "text": t, "time": f"2024-01-01T00:0{i}:00Z"} for i, t in enumerate(texts)
        ]}

    with server.client(owner[1]) as client:
        first = client.post("/chats/import", json=history(["The trail was muddy.", "Which trail?"]))
        assert first.status_code == 201, first.text

        grown = client.post("/chats/import", json=history(["The trail was muddy.", "Which trail?", "Ridge trail.", "Nice."]))
        assert grown.status_code == 200 and len(grown.json()["messages"]) == 4, grown.text  # the chat, grown

        edited = client.post("/chats/import", json=history(["The trail was dry.", "Which trail?", "Ridge trail.", "Nice.", "More?", "No."]))
        assert edited.status_code == 409, edited.text
        assert edited.json()["error"]["code"] == "message_differs" and "message 1 differs" in edited.json()["error"]["message"]
        assert len(client.get(f"/chats/{first.json()['chat']['id']}").json()["messages"]) == 4


def test_an_export_holding_one_conversation_twice_imports_it_once_and_two_different_ones_with_one_id_are_refused(server, owner):
    """Before: the identical copy was answered "already_imported" (imported before: it was not), and a
    different conversation with the same id was added to the first's chat as if it had grown."""
    twice = chatgpt_conversation("twice", "Twice", 1700000000)
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=[twice, chatgpt_conversation("other", "Other", 1700000500), twice])
        assert response.status_code == 201, response.text
        chats = response.json()["chats"]
        assert [(c["chat"]["title"], c["imported_messages"], c["already_imported"], c["skipped_copies"]) for c in chats] == [
            ("Twice", 2, False, 1), ("Other", 2, False, 0)
        ]
        assert len(client.get("/chats").json()["chats"]) == 2

        differ = [chatgpt_conversation("thrice", "Thrice", 1700001000), chatgpt_conversation("thrice", "Thrice, gone on", 1700001000, 4)]
        response = client.post("/chats/import", json=differ)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_import" and "the same id, chatgpt:thrice, but differ" in error["message"], error
        assert len(client.get("/chats").json()["chats"]) == 2  # nothing of it was imported


def test_memory_agent_import_says_an_identical_copy_was_skipped_and_refuses_different_ones_with_one_id(new_database, tmp_path):
    database_url, user = new_database("clidupes"), f"u{uuid.uuid4().hex[:10]}"
    twice = chatgpt_conversation("twice", "Twice", 1700000000)
    (tmp_path / "twice.json").write_text(json.dumps([twice, twice]))
    (tmp_path / "differ.json").write_text(json.dumps([twice, chatgpt_conversation("twice", "Twice, gone on", 1700000000, 4)]))

    done = run_import(tmp_path / "twice.json", database_url, user)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()
    assert line.startswith("Imported 2 messages ") and line.endswith("The export holds it twice, the same both times: the copy was skipped."), line

    refused = run_import(tmp_path / "differ.json", database_url, user)
    assert refused.returncode != 0 and refused.stdout == "", refused.stdout
    assert "the same id, chatgpt:twice, but differ" in refused.stderr, refused.stderr


def with_a_pasted_log(conversation: dict, chars: int = 45_000) -> dict:
    """The conversation with its first message a paste of ``chars`` characters (a build log)."""
    first = next(node for node in conversation["mapping"].values() if node["parent"] is None)
    first["message"]["content"]["parts"] = ["My build log:\n" + "\n".join(f"step {i}: cache miss, retrying" for i in range(chars // 28))]
    return conversation


def test_an_export_with_a_message_over_the_limit_is_imported_with_it_in_parts_by_both_entry_points(server, owner, new_database, tmp_path):
    """One pasted log over 20,000 characters refused the whole export (422 naming it), every conversation."""
    export = [chatgpt_conversation("short", "Short", 1700000000), with_a_pasted_log(chatgpt_conversation("pasted", "Pasted", 1700000500))]
    with server.client(owner[1]) as client:
        response = client.post("/chats/import", json=export)
        assert response.status_code == 201, response.text
        chats = response.json()["chats"]
        assert [(c["chat"]["title"], c["imported_messages"], c["split_messages"]) for c in chats] == [("Short", 2, 0), ("Pasted", 4, 1)]
        pasted = client.get(f"/chats/{chats[1]['chat']['id']}").json()["messages"]
        assert "".join(m["content"] for m in pasted[:3]) == export[1]["mapping"]["n0"]["message"]["content"]["parts"][0]
        assert all(len(m["content"]) <= 20_000 for m in pasted)

    (tmp_path / "export.json").write_text(json.dumps(export))
    done = run_import(tmp_path / "export.json", new_database("clisplit"), f"u{uuid.uuid4().hex[:10]}")
    assert done.returncode == 0, done.stderr
    short, pasted_line = done.stdout.strip().splitlines()
    assert short.endswith('"Short" of user ' + short.split(" of user ")[1]) and "in parts" not in short
    assert pasted_line.startswith("Imported 4 messages ") and pasted_line.endswith(
        "A message over 20,000 characters (the message limit) came in parts, one after another."), pasted_line
