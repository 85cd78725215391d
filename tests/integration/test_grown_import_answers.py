"""What a grown conversation's import says when its new messages are not added (real Postgres,
offline model): another import adding them right now, or an incomplete import of another export of
it; and what the CLI says when its addition is interrupted. The imports run here are made
deterministic by parking one in its progress callback (it beats its row meanwhile, as when an
exchange is slow), or, in a CLI process, in its third exchange."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from core.context import Context
from graph.assembly import compile_graph
from memory.chat_import import parse_import
from memory.import_job import ImportStopped, import_chat
from storage import api_keys, chat_imports, thread_owners
from storage.fenced_saver import FencedPostgresSaver
from tests.support.held_cli_import import REPO_ROOT, cli_env, interrupted_in_the_third_exchange
from tests.support.in_process_app import client_of, in_process_app

pytestmark = pytest.mark.slow  # each imports tens of messages through the memory steps


def interrupted_line(err: str) -> str:
    """The CLI's line about the interruption (a warning logged before it, as a heartbeat that timed out
    while the test held the import, may come first)."""
    return next((line for line in err.splitlines() if line.startswith("The import was interrupted")), err)


def history(n: int) -> dict:
    """Our own format with a ``source_id``: ``n`` messages; a larger ``n`` is a newer export of it."""
    return {"title": "Trails", "source_id": "trails-1", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "text": f"Trail {i} was muddy." if i % 2 == 0 else f"Which trail, {i}?",
         "time": f"2024-01-01T00:{i:02d}:00Z"} for i in range(n)
    ]}


def chat_of(n: int):
    [chat] = parse_import(history(n))
    return chat


def claude_export(n: int) -> list[dict]:
    """A Claude ``conversations.json`` of one conversation: its first ``n`` messages."""
    return [{"uuid": "5e0c1a2b-7777-4aaa-8bbb-000000000001", "name": "Trails", "created_at": "2024-01-01T00:00:00Z", "chat_messages": [
        {"uuid": f"5e0c1a2b-7777-4000-8000-{i:012d}", "sender": "human" if i % 2 == 0 else "assistant",
         "text": f"Trail {i} was muddy." if i % 2 == 0 else f"Which trail, {i}?", "created_at": f"2024-01-01T00:{i:02d}:00Z"}
        for i in range(n)
    ]}]


@pytest.fixture
async def graph(backend):
    return compile_graph(FencedPostgresSaver(backend.pool), backend.store)


async def messages_of(graph, chat_id: str) -> list:
    return (await graph.aget_state({"configurable": {"thread_id": chat_id}})).values.get("messages", [])


async def parked_extension(graph, backend, user_id: str, chat, after: int = 4):
    """The grown conversation's import as a task, parked once ``after`` messages are on the chat
    (its row running, beaten), and the event that lets it go on."""
    parked, release = asyncio.Event(), asyncio.Event()

    async def progress(n: int, total: int) -> None:
        if n >= after and not release.is_set():
            parked.set()
            await release.wait()

    task = asyncio.create_task(import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"), on_progress=progress))
    await asyncio.wait_for(parked.wait(), 120)
    return task, release


@pytest.mark.parametrize("export", ["the-same", "a-newer"])
async def test_a_grown_conversation_imported_while_another_import_adds_its_new_messages_says_so(backend, graph, user_id, export):
    """It said "nothing added" with no reason while the other import was adding the messages."""
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, chat_of(2), context=context)
    first, release = await parked_extension(graph, backend, user_id, chat_of(20))

    second = await import_chat(graph, backend.pool, user_id, chat_of(20 if export == "the-same" else 24), context=context)

    assert second.already_imported and second.chat_id == before.chat_id and second.messages == 0
    assert second.not_added == "import_in_progress"
    assert second.not_added_reason.startswith("Another import is adding this conversation's new messages to the chat now")
    if export == "the-same":  # nothing for the user to do: the other import adds them
        assert "import this export again" not in second.not_added_reason
    else:  # the other import adds only its own export's messages
        assert "import this export again when it has ended" in second.not_added_reason
    release.set()
    done = await first
    assert done.held_before == 2 and done.messages == 20 and len(await messages_of(graph, before.chat_id)) == 20
    if export == "a-newer":  # as it said: imported again, it adds the rest
        again = await import_chat(graph, backend.pool, user_id, chat_of(24), context=context)
        assert again.held_before == 20 and len(await messages_of(graph, before.chat_id)) == 24


async def incomplete_import(graph, backend, user_id: str, chat, monkeypatch) -> str:
    """``chat`` imported part way, stopped (its client left at the first look): the chat's id."""
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 0.001)  # the first look comes before the exchanges can end

    async def leave() -> bool:
        return True

    with pytest.raises(ImportStopped) as stopped:
        await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"), stop_when=leave)
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 0.5)
    [row] = (await chat_imports.of_threads(backend.pool, user_id, [stopped.value.chat_id])).values()
    assert row.state == "incomplete" and not row.extends_chat and row.imported < len(chat.messages)
    return stopped.value.chat_id


async def test_a_grown_conversation_whose_earlier_import_is_incomplete_says_to_resume_that_import_first(backend, graph, user_id, monkeypatch):
    """It said "nothing added" with no reason, and never how to go on."""
    context = Context(user_id=user_id, model="offline")
    chat_id = await incomplete_import(graph, backend, user_id, chat_of(20), monkeypatch)

    grown = await import_chat(graph, backend.pool, user_id, chat_of(24), context=context)

    assert grown.already_imported and grown.chat_id == chat_id and grown.messages == 0
    assert grown.not_added == "import_incomplete"
    reason = grown.not_added_reason
    assert "stopped part way" in reason and f"--resume {chat_id}" in reason and f"POST /chats/import?resume={chat_id}" in reason, reason
    # As it says: the earlier import resumed with its own history, the grown one then adds its new messages.
    resumed = await import_chat(graph, backend.pool, user_id, chat_of(20), context=context, resume=chat_id)
    assert resumed.messages == 20
    added = await import_chat(graph, backend.pool, user_id, chat_of(24), context=context)
    assert added.held_before == 20 and len(await messages_of(graph, chat_id)) == 24


async def test_the_http_answer_says_why_a_grown_conversations_new_messages_were_not_added(backend, graph, user_id, monkeypatch):
    key = await api_keys.create_key(backend.pool, user_id)
    context = Context(user_id=user_id, model="offline")
    [claude_before] = parse_import(claude_export(2))
    await import_chat(graph, backend.pool, user_id, claude_before, context=context)
    [claude_grown] = parse_import(claude_export(20))
    first, release = await parked_extension(graph, backend, user_id, claude_grown)
    ours = await incomplete_import(graph, backend, user_id, chat_of(20), monkeypatch)

    async with in_process_app(backend) as app, client_of(app, key) as client:
        busy = await client.post("/chats/import", json=claude_export(20))  # an export: per conversation, and 200
        incomplete = await client.post("/chats/import", json=history(24))  # ours: the chat, or 409 with why
    release.set()
    await first

    assert busy.status_code == 200, busy.text
    [out] = busy.json()["chats"]
    assert out["already_imported"] and out["not_added"] == "import_in_progress" and "Another import is adding" in out["not_added_reason"]
    assert incomplete.status_code == 409, incomplete.text
    error = incomplete.json()["error"]
    assert error["code"] == "import_incomplete" and f"POST /chats/import?resume={ours}" in error["message"]


async def test_our_format_keyed_as_an_exports_conversation_is_answered_as_our_format_with_the_chat_or_409(backend, user_id):
    """Our format may take an export's key as its source_id (docs/import.md: "the same key"); its answer was
    then an export's list of conversations (201, 200 with not_added), not the chat and 409, because the
    route told the formats apart by the key's prefix."""
    key = await api_keys.create_key(backend.pool, user_id)
    ours = {**history(2), "source_id": "chatgpt:6674191a-0b2c-8003-c7e8-3b4c5d6e7f03"}
    edited = {**history(4), "source_id": ours["source_id"]}
    edited["messages"][1] = {**edited["messages"][1], "text": "Which trail was it?"}
    async with in_process_app(backend) as app, client_of(app, key) as client:
        first = await client.post("/chats/import", json=ours)
        again = await client.post("/chats/import", json=ours)
        differs = await client.post("/chats/import", json=edited)

    assert first.status_code == 201, first.text
    chat_id = first.json()["chat"]["id"]
    assert [m["content"] for m in first.json()["messages"]] == [m["text"] for m in ours["messages"]]
    assert again.status_code == 200 and again.json()["chat"]["id"] == chat_id, again.text
    assert differs.status_code == 409 and differs.json()["error"]["code"] == "message_differs", differs.text


async def cli_import(backend, path: Path, user_id: str) -> subprocess.CompletedProcess:
    """``memory-agent import`` in its own process (this one's loop goes on meanwhile: a parked import beats its row)."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app.cli.main", "import", str(path), "--user", user_id], cwd=REPO_ROOT, env=cli_env(backend),
        capture_output=True, text=True, timeout=300,
    )


async def test_memory_agent_import_says_another_import_is_adding_a_grown_conversations_new_messages(tmp_path, backend, graph, user_id):
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, chat_of(2), context=context)
    first, release = await parked_extension(graph, backend, user_id, chat_of(20))
    path = tmp_path / "trails.json"
    path.write_text(json.dumps(history(20)))
    try:
        second = await cli_import(backend, path, user_id)
    finally:
        release.set()
        await first

    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == (
        f'Already imported: "Trails" is chat {before.chat_id} of user {user_id}; nothing added. Another import is adding this '
        "conversation's new messages to the chat now, from this same export: nothing more to do (should it stop part way, importing "
        "the export again adds the rest)."
    ), second.stdout


async def test_memory_agent_import_of_a_grown_conversation_whose_earlier_import_is_incomplete_says_to_resume_that_first(
    tmp_path, backend, graph, user_id, monkeypatch
):
    chat_id = await incomplete_import(graph, backend, user_id, chat_of(20), monkeypatch)
    path = tmp_path / "trails.json"
    path.write_text(json.dumps(history(24)))

    grown = await cli_import(backend, path, user_id)

    assert grown.returncode == 0, grown.stderr
    [line] = grown.stdout.strip().splitlines()
    assert line.startswith(f'Already imported: "Trails" is chat {chat_id} of user {user_id}; nothing added. The chat\'s import of this '
                           "conversation from another export stopped part way"), line
    assert f"`memory-agent import FILE --resume {chat_id}`" in line and "then import this export again" in line, line



async def test_ctrl_c_while_the_cli_adds_a_grown_conversations_messages_says_the_chat_keeps_whole_exchanges_and_how_to_go_on(
    tmp_path, backend, graph, user_id
):
    """The words for an interrupted addition: the chat was complete before, so it keeps whole exchanges
    and takes messages, and importing the export again adds the rest (no --resume). The command shown
    runs as shown (it was unquoted: a path with a space broke it)."""
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, chat_of(2), context=context)
    path = tmp_path / "trails export.json"
    path.write_text(json.dumps(history(30)))
    returncode, err = await interrupted_in_the_third_exchange(backend, path, user_id, before.chat_id)  # the second of the new ones

    assert returncode == 130, err
    said = interrupted_line(err)
    assert said == (
        f"The import was interrupted: chat {before.chat_id} keeps what it held and the whole new exchanges added so far (the one "
        f"under way was taken back), and takes messages. Import the export again to add the rest: memory-agent import '{path}' "
        f"--user {user_id}"
    ), err
    assert "--resume" not in err
    assert len(await messages_of(graph, before.chat_id)) == 4  # as it says: the exchange under way was taken back
    assert await chat_imports.of_threads(backend.pool, user_id, [before.chat_id]) == {}  # and it takes messages
    assert await thread_owners.threads_of(backend.pool, user_id) == [before.chat_id]

    # The command it shows, run as shown, adds the rest.
    command = shlex.split(said.split("add the rest: ", 1)[1])
    assert command[:2] == ["memory-agent", "import"]
    again = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app.cli.main", *command[1:]], cwd=REPO_ROOT, env=cli_env(backend), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and again.stdout.startswith("Added 26 new messages"), again.stdout + again.stderr
    assert len(await messages_of(graph, before.chat_id)) == 30


def two_conversation_export() -> list[dict]:
    """A Claude export of two conversations, "Trails" (30 messages, the older) and "Rivers" (4)."""
    [trails] = claude_export(30)
    rivers = {"uuid": "5e0c1a2b-7777-4aaa-8bbb-000000000002", "name": "Rivers", "created_at": "2024-02-01T00:00:00Z", "chat_messages": [
        {"uuid": f"5e0c1a2b-7777-4000-8001-{i:012d}", "sender": "human" if i % 2 == 0 else "assistant",
         "text": f"River {i} was high." if i % 2 == 0 else f"Which river, {i}?", "created_at": f"2024-02-01T00:{i:02d}:00Z"}
        for i in range(4)
    ]}
    return [trails, rivers]


async def test_ctrl_c_in_an_exports_first_conversation_says_importing_the_export_again_goes_on(tmp_path, backend, graph, user_id):
    """An export of several conversations interrupted in one: the CLI said the chat takes no message
    "until it is resumed (with its history alone, --resume)", a history the user does not have
    (``--resume`` refuses a file of several). Importing the export again goes on with it (its
    conversation is known by its id), and the command shown does that."""
    path = tmp_path / "claude export.json"
    path.write_text(json.dumps(two_conversation_export()))
    returncode, err = await interrupted_in_the_third_exchange(backend, path, user_id)  # in the first conversation

    assert returncode == 130, err
    [chat_id] = await thread_owners.threads_of(backend.pool, user_id)
    said = interrupted_line(err)
    assert said.startswith(f"The import was interrupted: chat {chat_id} keeps the exchanges imported so far, listed as incomplete."), err
    assert "--resume" not in said and said.endswith(f"memory-agent import '{path}' --user {user_id}"), said

    command = shlex.split(said.split("are not imported twice): ", 1)[1])
    again = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app.cli.main", *command[1:]], cwd=REPO_ROOT, env=cli_env(backend), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert [line.split(" into chat ")[0] for line in again.stdout.strip().splitlines()] == [
        "Imported 30 messages (15 exchanges, 2024-01-01 to 2024-01-01)", "Imported 4 messages (2 exchanges, 2024-02-01 to 2024-02-01)"
    ], again.stdout
    assert len(await messages_of(graph, chat_id)) == 30 and len(await thread_owners.threads_of(backend.pool, user_id)) == 2


async def test_a_grown_conversation_imported_while_the_first_import_of_an_older_export_runs_says_so(backend, graph, user_id):
    """The first import of the conversation (an older export of it) is running when a newer export
    comes: the newer one's new messages are not added, and it said "nothing added" with no reason,
    as if the chat would hold them."""
    context = Context(user_id=user_id, model="offline")
    first, release = await parked_extension(graph, backend, user_id, chat_of(10))  # (a first import, parked as the helper parks any)

    grown = await import_chat(graph, backend.pool, user_id, chat_of(14), context=context)

    assert grown.already_imported and grown.messages == 0
    assert grown.not_added == "import_in_progress", grown
    assert "import this export again when it has ended" in grown.not_added_reason, grown.not_added_reason
    release.set()
    done = await first
    assert done.messages == 10 and grown.chat_id == done.chat_id
    # As it says: imported again, it adds the rest.
    again = await import_chat(graph, backend.pool, user_id, chat_of(14), context=context)
    assert again.held_before == 10 and len(await messages_of(graph, done.chat_id)) == 14


async def test_ctrl_c_in_a_list_of_locomo_samples_does_not_say_importing_the_file_again_goes_on(tmp_path, backend, graph, user_id):
    """A list of LoCoMo samples is no export: its chats have no source id, so importing the file again
    imports every sample anew (a whole one twice) and leaves the interrupted chat incomplete for ever.
    The CLI said to do just that, "the conversations imported whole are not imported twice"."""
    from tests.support.locomo_sample import locomo_sample

    path = tmp_path / "locomo samples.json"
    path.write_text(json.dumps([locomo_sample("a"), locomo_sample("b")]))
    returncode, err = await interrupted_in_the_third_exchange(backend, path, user_id)  # in the first sample

    assert returncode == 130, err
    [chat_id] = await thread_owners.threads_of(backend.pool, user_id)
    said = interrupted_line(err)
    assert said.startswith(f"The import was interrupted: chat {chat_id} keeps the exchanges imported so far, listed as incomplete."), err
    assert "Import the export again" not in said and "not imported twice" not in said, said
    assert f"--resume {chat_id}" in said and "alone" in said, said

    # As it says: the sample alone, resumed, completes the chat (no second chat of it).
    alone = tmp_path / "sample a.json"
    alone.write_text(json.dumps(locomo_sample("a")))
    again = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app.cli.main", "import", str(alone), "--user", user_id, "--resume", chat_id], cwd=REPO_ROOT,
        env=cli_env(backend), capture_output=True, text=True, timeout=300,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert await thread_owners.threads_of(backend.pool, user_id) == [chat_id] and len(await messages_of(graph, chat_id)) == 8


async def test_an_exports_conversation_whose_import_failed_part_way_is_said_to_go_on_by_importing_the_export_again(backend, graph, user_id, monkeypatch):
    """A failure in an export's conversation said only "Resume it with the same history (`memory-agent
    import FILE --resume <id>` or POST /chats/import?resume=<id>)": both refuse an export of several
    conversations (the history alone is one the user does not have), as the CLI's Ctrl-C words said before."""
    from memory import import_job
    from memory.chat_import import ImportFailed

    real, calls = import_job._message, []

    def failing(m, mid):
        calls.append(mid)
        if len(calls) > 4:  # the third exchange
            raise RuntimeError("the database is away")
        return real(m, mid)

    monkeypatch.setattr(import_job, "_message", failing)
    trails, rivers = parse_import(two_conversation_export())
    with pytest.raises(ImportFailed) as failed:
        await import_chat(graph, backend.pool, user_id, trails, context=Context(user_id=user_id, model="offline"))
    said = str(failed.value)
    assert "import the export again" in said.lower() or "an export: import it again" in said, said

    # As it says: the export imported again goes on with the conversation.
    monkeypatch.setattr(import_job, "_message", real)
    again = parse_import(two_conversation_export())
    done = await import_chat(graph, backend.pool, user_id, again[0], context=Context(user_id=user_id, model="offline"))
    assert done.chat_id == failed.value.chat_id and done.messages == 30
