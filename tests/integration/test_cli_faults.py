"""The CLI under the same run lock and stop as the API: `memory-agent chat` processes on a
real Postgres database, a slow offline model (``offline-slow``), SIGINT and a terminal (pty).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # CLI processes, a pty and signals

SLOW_MODEL = "offline-slow:300"  # ~30 words a reply: ~9 s, time enough to act mid-reply


def cli_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update({"DATABASE_URL": database_url, "MEMORY_AGENT_MODEL": SLOW_MODEL, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"})
    return env


def chat_process(database_url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "chat", *args],
        cwd=REPO_ROOT,
        env=cli_env(database_url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_row(database_url: str, user: str) -> dict | None:
    """The user's latest run row (None before the first, or before the table exists)."""
    try:
        with psycopg.connect(database_url, row_factory=psycopg.rows.dict_row) as conn:
            return conn.execute(
                "SELECT run_id, thread_id, status, partial_reply FROM memory_agent_runs WHERE user_id = %s ORDER BY started_at DESC LIMIT 1",
                (user,),
            ).fetchone()
    except psycopg.errors.UndefinedTable:
        return None


def wait_mid_reply(database_url: str, user: str, timeout: float = 120) -> dict:
    """Wait until the user's reply is streaming (its heartbeat has saved some of it)."""
    deadline = time.monotonic() + timeout
    while True:
        row = run_row(database_url, user)
        if row and row["status"] == "running" and row["partial_reply"]:
            return row
        assert time.monotonic() < deadline, f"no reply was streaming within {timeout}s: {row}"
        time.sleep(0.1)


def wait_final(database_url: str, run_id, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(database_url) as conn:
            status = conn.execute("SELECT status FROM memory_agent_runs WHERE run_id = %s", (run_id,)).fetchone()[0]
        if status not in ("running", "stopping", "committing"):
            return status
        assert time.monotonic() < deadline, f"run {run_id} still {status}"
        time.sleep(0.1)


@pytest.fixture
async def memory(new_database, minilm):
    """A fresh database, and a backend on it to look at what the CLI stored."""
    from graph.assembly import compile_graph
    from memory.backend import open_memory

    url = new_database("cli")
    async with open_memory(url, minilm) as backend:
        yield url, backend, compile_graph(backend.checkpointer, backend.store)


async def messages_of(graph, thread_id: str) -> list:
    return (await graph.aget_state({"configurable": {"thread_id": thread_id}})).values.get("messages", [])


async def test_a_second_window_on_a_busy_chat_is_told_so_and_no_message_is_lost(memory):
    url, backend, graph = memory
    user, chat = f"u{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    first = chat_process(url, "--user", user, "--chat", chat)
    second = chat_process(url, "--user", user, "--chat", chat)
    try:
        second.stdin.write(b"/chats\n")  # its answer says the second window is up (before the reply starts)
        second.stdin.flush()
        assert second.stderr.readline()
        first.stdin.write(b"I have a dog named Rex\n")
        first.stdin.flush()
        wait_mid_reply(url, user)
        out, err = second.communicate(b"I live in Rome\n", timeout=120)
        assert second.returncode == 1, err.decode()
        assert "this chat is busy in another window" in err.decode() and "Your message was not sent" in err.decode()
        assert out == b""
        assert run_row(url, user)["status"] == "running"  # it was refused while the first window's reply ran
        out, err = first.communicate(b"", timeout=120)
        assert first.returncode == 0, err.decode()
    finally:
        for p in (first, second):
            if p.poll() is None:
                p.kill()

    # The second window sends again once the reply is done: both messages are in the chat, once.
    again = chat_process(url, "--user", user, "--chat", chat)
    out, err = again.communicate(b"I live in Rome\n", timeout=120)
    assert again.returncode == 0, err.decode()
    humans = [m.text for m in await messages_of(graph, chat) if m.type == "human"]
    assert humans == ["I have a dog named Rex", "I live in Rome"]
    assert [m.type for m in await messages_of(graph, chat)] == ["human", "ai", "human", "ai"]


async def test_ctrl_c_during_a_reply_stops_the_reply_keeps_it_as_stopped_and_the_chat_goes_on(memory):
    from core.messages import is_stopped, sent_at
    from memory.user_memory import list_chats, list_facts

    url, backend, graph = memory
    user = f"u{uuid.uuid4().hex[:8]}"
    cli = chat_process(url, "--user", user, "--new")
    try:
        cli.stdin.write(b"I have a dog named Rex\n")
        cli.stdin.flush()
        row = wait_mid_reply(url, user)
        cli.send_signal(signal.SIGINT)
        assert wait_final(url, row["run_id"]) == "stopped"
        assert cli.poll() is None  # the program goes on
        # A new chat stopped in its first reply is a chat like any other: listed, titled.
        assert row["thread_id"] in [c.thread_id for c in await list_chats(backend.store, user)]
        out, err = cli.communicate(b"hello\n", timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err.decode()
    assert "Stopped. The reply so far is kept, marked as stopped" in err.decode()

    messages = await messages_of(graph, row["thread_id"])
    assert [m.type for m in messages] == ["human", "ai", "human", "ai"]
    stopped, answered = messages[1], messages[3]
    assert is_stopped(stopped) and stopped.text and not is_stopped(answered)
    assert sent_at(messages[0]) is not None and sent_at(messages[0]) <= sent_at(stopped)  # the stopped turn's message keeps its time
    # What the terminal showed of each reply, one line each, is what the chat keeps.
    assert out.decode().splitlines() == [stopped.text, answered.text]
    assert not any("Rex" in f.text for f in await list_facts(backend.store, user))  # nothing learned from it


def read_until(fd: int, pattern: str, timeout: float = 120) -> str:
    """Read the terminal until ``pattern`` (a regex) shows up; what was read, escape codes (colours, cursor moves) removed."""
    seen = ""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, seen):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{pattern!r} did not show up; the terminal showed:\n{seen}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            seen += re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", chunk.decode(errors="replace"))
    assert re.search(pattern, seen), f"{pattern!r} did not show up; the terminal showed:\n{seen}"
    return seen


async def test_in_a_terminal_ctrl_c_stops_the_reply_and_ctrl_c_at_the_prompt_quits(memory):
    from core.messages import is_stopped

    url, backend, graph = memory
    user = f"u{uuid.uuid4().hex[:8]}"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a terminal
        os.chdir(REPO_ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "app.cli.main", "chat", "--user", user, "--new"], cli_env(url))
    try:
        read_until(fd, r"you>")  # (the line editor draws the space after it with a cursor move)
        os.write(fd, b"I have a dog named Rex\r")
        row = wait_mid_reply(url, user)
        os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT
        shown = read_until(fd, r"Stopped\. The reply so far is kept[^\n]*\n.*you>")
        assert row["status"] == "running" and wait_final(url, row["run_id"]) == "stopped"
        os.write(fd, b"\x03")  # at the prompt: quit
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    messages = await messages_of(graph, row["thread_id"])
    assert [m.type for m in messages] == ["human", "ai"] and is_stopped(messages[1])
    assert messages[1].text in shown.replace("\r\n", "\n")
