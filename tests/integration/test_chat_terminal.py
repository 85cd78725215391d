"""`memory-agent chat` in a real pseudo-terminal: what a person at a terminal types and sees.

The chat runs as its own process on a pty (pexpect), with the offline model, on the suite's
Postgres; what it prints is fed to a terminal emulator (pyte), so the tests read the screen a
person would see, after every redraw. Pastes are sent as terminals send them: wrapped in
bracketed-paste marks (ESC[200~ ... ESC[201~).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from pathlib import Path

import pexpect
import pyte
import pytest

from app.cli.chat_session import COMMANDS, ChatSession
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # CLI processes on a pseudo-terminal

ROWS, COLS = 60, 160
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
UP = "\x1b[A"


class Terminal:
    """The chat process on a pty, and the screen a VT100 terminal would show for its output."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.transcript: list[str] = []  # every character the chat wrote, escape codes too
        self.child = pexpect.spawn(
            sys.executable, ["-m", "app.cli.main", *args], cwd=str(REPO_ROOT), env=env,
            dimensions=(ROWS, COLS), encoding="utf-8", codec_errors="replace",
        )  # fmt: skip
        # The emulator answers what the program asks the terminal (its cursor position).
        self.screen.write_process_input = self.child.send

    def pump(self, seconds: float = 0.2) -> None:
        """Read what the chat wrote for up to ``seconds`` and draw it."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                data = self.child.read_nonblocking(65536, timeout=max(0.0, min(0.1, deadline - time.monotonic())))
            except pexpect.TIMEOUT:
                data = ""
            except pexpect.EOF:
                return
            if data:
                self.transcript.append(data)
                self.stream.feed(data)
            if time.monotonic() >= deadline:
                return

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def wait_for(self, what: str, ready, timeout: float = 90) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.3)
            if ready(self.lines):
                return self.lines
            if not self.child.isalive():
                self.pump(0.5)
                break
        screen = "\n".join(line for line in self.lines if line)
        raise AssertionError(f"the chat never showed {what}; its screen:\n{screen}")

    def send(self, text: str, chunk: int = 512) -> None:
        """Type or paste ``text``, in pieces, drawing the output between them (the chat echoes as it reads)."""
        for start in range(0, len(text), chunk):
            self.child.send(text[start : start + chunk])
            self.pump(0.02)

    def paste(self, text: str) -> None:
        self.send(PASTE_START + text + PASTE_END)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def prompts_on(lines: list[str]) -> int:
    return sum(1 for line in lines if line.startswith("you>"))


def waiting_at_a_new_prompt(lines: list[str]) -> bool:
    """The last non-blank line is an empty prompt: the chat waits for the next message."""
    shown = [line for line in lines if line.strip()]
    return bool(shown) and shown[-1] == "you>"


@pytest.fixture
def chat_env(backend, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL")}
    env.update(
        DATABASE_URL=backend.url,  # the suite's Postgres (each test its own user)
        MEMORY_AGENT_STATE_DIR=str(tmp_path / "state"),
        MEMORY_AGENT_CACHE=str(tmp_path / "cache"),
        TERM="xterm",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def terminal_chat(chat_env, user_id):
    term = Terminal(["chat", "--user", user_id, "--new"], chat_env)
    yield term
    term.close()


async def stored_messages(backend, user_id: str, thread_id: str) -> list[tuple[str, str]]:
    session = ChatSession(backend, user_id, thread_id, interactive=False)
    state = await session.graph.aget_state(session.config)
    return [(m.type, m.text) for m in state.values.get("messages") or []]


CHAT_LINE = re.compile(r"Chat ([0-9a-f-]{36}) as user")


def chat_id_on(lines: list[str]) -> str:
    found = CHAT_LINE.search("\n".join(lines))
    assert found, lines
    return found.group(1)


async def test_on_a_terminal_help_lists_every_command_and_up_recalls_the_last_line(terminal_chat, user_id, tmp_path):
    term = terminal_chat
    await asyncio.to_thread(term.wait_for, "its first prompt", waiting_at_a_new_prompt)
    term.send("/help\r")
    lines = await asyncio.to_thread(term.wait_for, "the help", lambda ls: any("/regenerate" in l for l in ls) and waiting_at_a_new_prompt(ls))
    listed = "\n".join(lines)
    assert all(name in listed for name, _ in COMMANDS), listed

    # Up recalls the last line typed (the terminal's own line editor printed ^[[A).
    term.send(UP)
    await asyncio.to_thread(term.wait_for, "/help recalled by Up", lambda ls: [l for l in ls if l.strip()][-1] == "you> /help")
    term.send("\r")  # sent again: the help again
    await asyncio.to_thread(term.wait_for, "the help twice", lambda ls: sum("/regenerate" in l for l in ls) >= 2 and waiting_at_a_new_prompt(ls))
    term.send("/quit\r")
    await asyncio.to_thread(term.child.expect, pexpect.EOF, timeout=60)
    term.child.close()
    assert term.child.exitstatus == 0
    assert "+/help" in (tmp_path / "state" / "history" / user_id).read_text()  # kept for this user's next chat


async def test_on_a_terminal_a_12_line_paste_is_one_message_and_a_25000_character_paste_is_refused_not_cut(
    terminal_chat, backend, user_id, tmp_path
):
    term = terminal_chat
    # The chat's line is printed above the prompt by the line editor's next redraw, which may come
    # after the prompt itself (a fresh-clone CI run read the screen in between): wait for both.
    lines = await asyncio.to_thread(term.wait_for, "its first prompt and its chat", lambda ls: waiting_at_a_new_prompt(ls) and CHAT_LINE.search("\n".join(ls)))
    thread_id = chat_id_on(lines)

    # A paste of 12 lines is one message, with one reply (it was 12 messages and 12 replies).
    paragraphs = [f"Line {i} of the pasted notes: the garden needs {i} more tulips." for i in range(1, 13)]
    term.paste("\n".join(paragraphs))
    term.send("\r")
    await asyncio.to_thread(term.wait_for, "the reply to the paste", lambda ls: waiting_at_a_new_prompt(ls) and "agent>" in "\n".join(ls))
    stored = await stored_messages(backend, user_id, thread_id)
    assert [kind for kind, _ in stored] == ["human", "ai"], stored
    assert stored[0][1] == "\n".join(paragraphs)

    # A paste of 25,000 characters (over the 20,000 limit; it was stored cut at 4,095): refused with its size.
    words = " ".join(f"w{i:05d}" for i in range(4200))[:25000]
    assert len(words) == 25000
    term.paste(words)
    term.send("\r")
    lines = await asyncio.to_thread(term.wait_for, "the refusal of the long paste", lambda ls: any("too long" in l for l in ls))
    refusal = " ".join(line for line in lines if line)
    assert "25,000 characters, the limit is 20,000" in refusal, refusal
    assert "Nothing was sent; Up brings your text back." in refusal
    await asyncio.to_thread(term.wait_for, "a prompt after the refusal", waiting_at_a_new_prompt)
    assert await stored_messages(backend, user_id, thread_id) == stored  # nothing of it was stored, cut or whole
    term.send(UP)  # the refused text is back on the line, whole, to shorten
    tail = words[-300:]  # (the line wraps over more rows than the screen has: its end is what shows)

    def back_below_the_refusal(lines: list[str]) -> bool:
        errors = [i for i, line in enumerate(lines) if "error:" in line]
        below = lines[errors[-1] + 1 :] if errors else lines  # the echo of the first paste is above the error
        return tail in "".join(line.ljust(COLS) for line in below)

    await asyncio.to_thread(term.wait_for, "the refused text back on the line", back_below_the_refusal)
    term.send("\x15")  # Ctrl-U clears it

    term.send("/quit\r")
    await asyncio.to_thread(term.child.expect, pexpect.EOF, timeout=60)
    term.child.close()
    assert term.child.exitstatus == 0
    assert "WARNING" not in "".join(term.transcript)
    assert "+Line 12 of the pasted notes" in (tmp_path / "state" / "history" / user_id).read_text()  # one entry


async def test_on_a_terminal_the_remembered_line_comes_before_the_next_prompt(terminal_chat):
    term = terminal_chat
    await asyncio.to_thread(term.wait_for, "its first prompt", waiting_at_a_new_prompt)
    term.send("My name is Dana and I live in Haifa\r")

    def remembered_then_prompt(lines: list[str]) -> bool:
        shown = [line for line in lines if line.strip()]
        at = [i for i, line in enumerate(shown) if "remembered:" in line]
        return bool(at) and waiting_at_a_new_prompt(lines) and shown[at[-1]].lstrip().startswith("remembered:")

    lines = await asyncio.to_thread(term.wait_for, "the remembered line above an empty prompt", remembered_then_prompt)
    assert not any("you>" in line and "remembered" in line for line in lines), lines
    assert "Haifa" in "\n".join(line for line in lines if "remembered:" in line)


async def test_on_a_terminal_a_long_non_ascii_user_id_keeps_its_line_history_and_a_forget_does_not_end_the_chat(chat_env, user_id, tmp_path):
    """A user id may hold 200 characters, but 200 'é' are 400 bytes, past a file name's 255: the line
    history was never kept (silently), and /forget ended the chat with "OSError: File name too long"."""
    long_id = "é" * 187 + user_id  # 200 characters
    term = Terminal(["chat", "--user", long_id, "--new"], chat_env)
    try:
        await asyncio.to_thread(term.wait_for, "its first prompt", waiting_at_a_new_prompt)
        term.send("I live in Haifa\r")
        await asyncio.to_thread(term.wait_for, "the reply", lambda ls: waiting_at_a_new_prompt(ls) and "remembered:" in "\n".join(ls))
        term.send("/forget Haifa\r")
        lines = await asyncio.to_thread(term.wait_for, "what was forgotten", lambda ls: waiting_at_a_new_prompt(ls) and "Forgot:" in "\n".join(ls))
        assert "Traceback" not in "".join(term.transcript), "\n".join(lines)
        term.send("My name is Tom\r")
        await asyncio.to_thread(term.wait_for, "the next reply", lambda ls: waiting_at_a_new_prompt(ls) and "name = Tom" in "\n".join(ls))
        term.send("/quit\r")
        await asyncio.to_thread(term.child.expect, pexpect.EOF, timeout=60)
        term.child.close()
        assert term.child.exitstatus == 0
    finally:
        term.close()
    (kept,) = (tmp_path / "state" / "history").iterdir()  # one file, for this user's next chat
    typed = kept.read_text()
    assert "+My name is Tom" in typed and "Haifa" not in typed  # the lines that carry the forgotten word went
