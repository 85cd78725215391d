"""``memory-agent chat``: the chat session on a terminal (app/cli/chat_line.py) or fed by a pipe, one
message per line."""

from __future__ import annotations

import sys
import uuid

from app.cli.chat_line import chat_on_terminal
from app.cli.chat_session import ChatSession, not_made
from llm.chat_model import load_chat_model, offline_notice
from memory.backend import MemoryBackend
from memory.queries import list_chats, owned_chats


async def latest_thread(backend: MemoryBackend, user_id: str) -> str | None:
    chats = await owned_chats(backend.pool, user_id, await list_chats(backend.store, user_id))
    return chats[0].thread_id if chats else None


async def run_chat(backend: MemoryBackend, *, user_id: str, chat_id: str | None, new: bool, model: str | None, stdin=None) -> int:
    stdin = stdin or sys.stdin
    if stdin is None:  # started with stdin closed (`<&-`)
        print("error: stdin is closed: pipe the messages in, one a line, or run at a terminal", file=sys.stderr)
        return 2
    interactive = stdin.isatty()
    thread_id = chat_id or (None if new else await latest_thread(backend, user_id)) or str(uuid.uuid4())
    overrides = {"model": model} if model else {}
    session = ChatSession(backend, user_id, thread_id, interactive, context_overrides=overrides)
    if chat_id and not await session.may_read():
        return 1
    try:  # a model that cannot be loaded is said before any input is read, not at the first message
        load_chat_model(session.context.model)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    notice = offline_notice(session.context.model)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    if interactive:
        return await chat_on_terminal(session)
    return await _scripted(session, stdin)


async def _scripted(session: ChatSession, stdin) -> int:
    buffer = getattr(stdin, "buffer", None)
    lines = iter(buffer) if buffer is not None else (l.encode("utf-8") for l in stdin)
    for number, raw in enumerate(lines, start=1):
        raw = raw.rstrip(b"\r\n")
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM (a script saved by a Windows editor) opens no message
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            session.drop_forget_question()  # only the very next line answers it
            session.error(f"line {number} is not valid UTF-8 (byte {exc.start}); skipped")
            continue
        if line.startswith("/"):
            if not await session.command(line):
                break
            continue
        await session.send(line)
    if (pending := await session.pending_confirmation()) is not None:
        session.note(f"The input ended before the confirmation was answered: {not_made(pending)} (the chat still asks it).")
    if session.confirming_forget:
        session.note("The input ended before forgetting everything was confirmed: nothing was deleted.")
    if session.failures:
        print(f"error: {session.failures} of what was sent failed (said above), so the exit status is 1", file=session.err, flush=True)
        return 1
    return 0
