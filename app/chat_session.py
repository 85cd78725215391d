"""`memory-agent chat`: an interactive chat on a terminal, or one message per line from a pipe.

On a terminal replies stream token by token and a dim line shows what was
remembered. From a pipe each input line is one message and each reply is printed
on one stdout line (notes go to stderr), so scripts and tests can drive it.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field
from typing import TextIO

import psycopg
from langchain_core.messages import AIMessageChunk, HumanMessage
from langgraph.types import Command

from app.memory_report import memory_snapshot, render_snapshot
from graph.assembly import compile_graph
from graph.context import Context
from graph.input_validation import validate_user_text
from llm.chat_model import offline_notice
from llm.text_tool_calls import CallTextFilter
from memory.backend import MemoryBackend
from memory.errors import InvalidMessage
from memory.schemas import SummaryBoard
from memory.user_memory import forget_user, list_chats, search_facts

DIM, RESET = "\033[2m", "\033[0m"
HELP = "Commands: /memory /summary /chats /new /forget [text] /quit"
YES = {"y", "yes", "ok", "confirm", "approve"}
NO = {"n", "no", "cancel", "decline"}


@dataclass
class ChatSession:
    backend: MemoryBackend
    user_id: str
    thread_id: str
    interactive: bool
    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    context_overrides: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.graph = compile_graph(self.backend.checkpointer, self.backend.store)
        self.context = Context(user_id=self.user_id, **self.context_overrides)

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.thread_id}}

    def note(self, text: str) -> None:
        """A secondary line: dim on a terminal, stderr from a pipe."""
        if self.interactive:
            print(f"{DIM}{text}{RESET}", file=self.out, flush=True)
        else:
            print(text, file=self.err, flush=True)

    async def send(self, text: str) -> str | None:
        """Run one turn; print the reply (streamed on a terminal). Returns the reply text.

        When a task change awaits confirmation, a "yes"/"no" answers it; anything else is a new message.
        """
        try:
            text = validate_user_text(text, self.context.max_message_chars)
        except InvalidMessage as exc:
            print(f"error: {exc}", file=self.err, flush=True)
            return None
        pending = await self.pending_confirmation()
        answer = text.strip().casefold().rstrip(".!")
        if pending is not None and answer in YES | NO:
            return await self._run(Command(resume={"approved": answer in YES}))
        return await self._run({"messages": [HumanMessage(text, id=str(uuid.uuid4()))]})

    async def pending_confirmation(self) -> dict | None:
        state = await self.graph.aget_state(self.config)
        for interrupt in getattr(state, "interrupts", ()) or ():
            if isinstance(interrupt.value, dict) and interrupt.value.get("type") == "task_change":
                return interrupt.value
        return None

    async def _run(self, graph_input) -> str | None:
        reply_parts: list[str] = []
        memory_lines: list[str] = []
        calls = CallTextFilter()  # a tool call a model wrote as text is never printed

        def show(piece: str) -> None:
            if piece:
                reply_parts.append(piece)
                if self.interactive:
                    print(piece, end="", file=self.out, flush=True)

        try:
            async for mode, chunk in self.graph.astream(
                graph_input, self.config, context=self.context, stream_mode=["messages", "custom"]
            ):
                if mode == "messages":
                    message, meta = chunk
                    if meta.get("langgraph_node") == "reply" and isinstance(message, AIMessageChunk) and message.content:
                        show(calls.feed(message.id, message.content if isinstance(message.content, str) else ""))
                elif mode == "custom" and isinstance(chunk, dict) and chunk.get("event") == "memory":
                    memory_lines.append(chunk.get("described") or f"memory not updated: {chunk.get('error')}")
            show(calls.finish())
        except psycopg.Error as exc:
            await self._report_database_failure(exc)
            return None
        state = await self.graph.aget_state(self.config)
        if state.values.get("error"):
            print(f"error: {state.values['error']}", file=self.err, flush=True)
            return None
        reply = "".join(reply_parts)
        if not reply and state.values.get("messages"):  # a model that does not stream
            last = state.values["messages"][-1]
            if last.type == "ai" and not getattr(last, "tool_calls", None):
                reply = last.content if isinstance(last.content, str) else str(last.content)
                if self.interactive:
                    print(reply, end="", file=self.out)
        if self.interactive:
            print(file=self.out, flush=True)
        elif reply:
            print(reply.replace("\n", " "), file=self.out, flush=True)
        for line in memory_lines:
            self.note(f"  remembered: {line}")
        pending = await self.pending_confirmation()
        if pending is not None:
            await self._ask(pending)
        return reply

    async def _ask(self, change: dict) -> None:
        due = f" (due {change['due']})" if change.get("due") else ""
        question = f"Confirm: {change['action']} task '{change['description']}'{due}? [yes/no]"
        if not self.interactive:
            print(question, file=self.err, flush=True)  # the next input line answers it
            return
        try:
            answer = input(f"{question} ").strip().casefold()
        except EOFError:
            answer = "no"
        await self._run(Command(resume={"approved": answer in YES}))

    async def _report_database_failure(self, exc: Exception) -> None:
        detail = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        try:
            state = await self.graph.aget_state(self.config)
            answered = bool(state.values.get("messages")) and state.values["messages"][-1].type == "ai"
        except psycopg.Error:
            answered = False
        if answered:
            hint = "The reply was saved, but the memories of this turn were not (nothing half-written was kept)."
        else:
            hint = "Nothing half-written was kept; send the message again once the database is back."
        print(f"\nerror: the database failed during this turn ({detail}). {hint}", file=self.err, flush=True)

    async def command(self, line: str) -> bool:
        """Handle a slash command. Returns False when the chat should end."""
        name, _, arg = line.strip().partition(" ")
        store = self.backend.store
        if name in ("/quit", "/exit"):
            return False
        if name == "/memory":
            self.note(render_snapshot(await memory_snapshot(store, self.user_id)))
        elif name == "/summary":
            state = await self.graph.aget_state(self.config)
            board = SummaryBoard.model_validate(state.values.get("summary") or {})
            folds = state.values.get("summary_folds", 0)
            self.note(board.render() + f"\n({folds} folds)" if not board.is_empty() else "No summary yet: the whole chat still fits the model's view.")
        elif name == "/chats":
            chats = await list_chats(store, self.user_id)
            self.note("\n".join(f"{'*' if c.thread_id == self.thread_id else ' '} {c.thread_id}  {c.title}  ({c.message_count} messages)" for c in chats) or "No chats yet.")
        elif name == "/new":
            self.thread_id = str(uuid.uuid4())
            self.note(f"New chat {self.thread_id}")
        elif name == "/forget":
            await self._forget(arg.strip())
        else:
            self.note(HELP)
        return True

    async def _forget(self, what: str) -> None:
        store = self.backend.store
        if not what:
            count = await forget_user(store, self.user_id)
            self.note(f"Forgot everything stored about you ({count} items). Chat histories stay until deleted.")
            return
        hits = [(f, s) for f, s in await search_facts(store, self.user_id, what, limit=3) if s >= 0.6]
        if not hits:
            self.note(f"No stored fact matches {what!r}. /memory lists them.")
            return
        fact = hits[0][0]
        await store.adelete(("users", self.user_id, "facts"), fact.id)
        self.note(f"Forgot: {fact.text}")


async def latest_thread(backend: MemoryBackend, user_id: str) -> str | None:
    chats = await list_chats(backend.store, user_id)
    return chats[0].thread_id if chats else None


async def run_chat(backend: MemoryBackend, *, user_id: str, chat_id: str | None, new: bool, model: str | None, stdin=None) -> int:
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    thread_id = chat_id or (None if new else await latest_thread(backend, user_id)) or str(uuid.uuid4())
    overrides = {"model": model} if model else {}
    session = ChatSession(backend, user_id, thread_id, interactive, context_overrides=overrides)
    notice = offline_notice(session.context.model)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    if interactive:
        session.note(f"Chat {thread_id} as user {user_id}. {HELP}")
        return await _interactive(session)
    return await _scripted(session, stdin)


async def _interactive(session: ChatSession) -> int:
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            print(file=session.out)
            return 0
        if line.startswith("/"):
            if not await session.command(line):
                return 0
            continue
        if line.strip():
            print("agent> ", end="", file=session.out, flush=True)
            await session.send(line)


async def _scripted(session: ChatSession, stdin) -> int:
    failures = 0
    buffer = getattr(stdin, "buffer", None)
    lines = iter(buffer) if buffer is not None else (l.encode("utf-8") for l in stdin)
    for number, raw in enumerate(lines, start=1):
        raw = raw.rstrip(b"\r\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            print(f"error: line {number} is not valid UTF-8 (byte {exc.start}); skipped", file=session.err, flush=True)
            failures += 1
            continue
        if line.startswith("/"):
            if not await session.command(line):
                break
            continue
        if await session.send(line) is None:
            failures += 1
    return 1 if failures else 0

