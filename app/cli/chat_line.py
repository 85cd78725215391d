"""The chat on a terminal: a line editor (prompt_toolkit), as a modern terminal app has one.

- Up and Down recall earlier lines, kept per user in the state folder (``chat_logging.history_path``).
- Bracketed paste: a paste of many lines arrives as one message, whole (the terminal's own line
  editor cut a line at 4,095 characters and sent each pasted line as a message). A message over
  ``max_message_chars`` is refused by the session with its size and the limit, never cut.
- Output while the prompt is up (the last turn's ``remembered:`` line, written while its memory
  work finishes) is printed above the prompt, which is drawn again below it.

A pipe does not come here: ``chat_run._scripted`` reads one message per line.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.output import create_output
from prompt_toolkit.patch_stdout import patch_stdout

from app.cli.chat_logging import OneCalmLine, history_path
from app.cli.chat_session import HELP, ChatSession
from core.errors import InvalidMessage
from core.text_validation import validate_user_text

PROMPT = "you> "


def _key_bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")  # Esc then Enter, or Alt-Enter: a new line inside the message
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    return keys


def _history(user_id: str) -> History:
    path = history_path(user_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600, exist_ok=True)  # what the user typed: theirs only
        return FileHistory(str(path))
    except OSError:  # a read-only home: history for this session only
        return InMemoryHistory()


def _forget_history(prompt: PromptSession, user_id: str) -> None:
    """After "forget everything": the lines the user typed go too (file and this session's list)."""
    history_path(user_id).unlink(missing_ok=True)
    prompt.history = InMemoryHistory()
    prompt.default_buffer.history = prompt.history


def _forget_history_lines(prompt: PromptSession, user_id: str, redactor) -> None:
    """After a forget: the typed lines that carry a forgotten word leave the history (file and list)."""
    kept = [line for line in reversed(prompt.history.get_strings()) if not redactor.carries(line)]
    history_path(user_id).unlink(missing_ok=True)
    prompt.history = _history(user_id)
    for line in reversed(kept):
        prompt.history.append_string(line)
    prompt.default_buffer.history = prompt.history


async def chat_on_terminal(session: ChatSession) -> int:
    session.background_memory = True
    output = create_output(stdout=sys.stdout)
    # No cursor-position requests: they only size menus below the prompt, which this line has none of,
    # and a terminal that does not answer them got a "WARNING: your terminal doesn't support…" line.
    if hasattr(output, "enable_cpr"):
        output.enable_cpr = False
    prompt: PromptSession[str] = PromptSession(history=_history(session.user_id), key_bindings=_key_bindings(), output=output)
    session.ask_line = prompt.prompt_async  # a task confirmation is asked on the same line editor
    session.on_forget_all.append(lambda: _forget_history(prompt, session.user_id))
    session.on_forget_words.append(lambda redactor: _forget_history_lines(prompt, session.user_id, redactor))
    # raw: the session's dim lines keep their colour codes. Everything printed from here on, by the
    # session or a log record, goes above the prompt when one is shown.
    with patch_stdout(raw=True):
        session.out, session.err = sys.stdout, sys.stderr
        for handler in logging.getLogger().handlers:
            if isinstance(handler, OneCalmLine):
                handler.say = session.note
        session.note(f"Chat {session.thread_id} as user {session.user_id}. {HELP}")
        while True:
            try:
                line = await prompt.prompt_async(PROMPT)
            except (EOFError, KeyboardInterrupt, asyncio.CancelledError):
                print(file=session.out)
                try:
                    await session.settle()  # the last turn's memory work is not cut off by quitting
                except (KeyboardInterrupt, asyncio.CancelledError):
                    pass
                return 0
            if line.startswith("/"):
                if not await session.command(line):
                    await session.settle()
                    return 0
                continue
            if not line.strip():
                continue
            try:
                validate_user_text(line, session.context.max_message_chars)
            except InvalidMessage as exc:  # said on its own line, not after "agent> "; the text is not lost
                session.error(f"{exc} Nothing was sent; Up brings your text back.")
                continue
            print("agent> ", end="", file=session.out, flush=True)
            await session.send(line)
