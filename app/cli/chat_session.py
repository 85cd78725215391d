"""`memory-agent chat`: an interactive chat on a terminal, or one message per line from a pipe.

On a terminal replies stream token by token and a dim line shows what was
remembered. From a pipe each input line is one message and each reply is printed
on one stdout line (notes go to stderr), so scripts and tests can drive it.

Turns run exactly as the HTTP API runs them (app.runs.active_runs, app.runs.turn_runner): the same
per-chat run lock, so a second window on a busy chat is told so and nothing is lost, and
the same stop. Ctrl-C during a reply stops the reply, not the program: the message and
the reply so far stay in the chat, the reply marked stopped (memory learns nothing from
it). Ctrl-C at the prompt quits.

Chats are switched with ``/chats`` (numbered), ``/open N`` or ``/open <words>``, or in plain
words: "go back to the chat about the bank" offers the one clear match (switched after a
yes) or lists several to pick from by number; such a message is not sent to the model.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from typing import TextIO

import psycopg
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from app.runs.active_runs import ActiveRuns
from app.cli.memory_report import memory_snapshot, render_snapshot
from app.runs.turn_runner import TurnRunner, TurnSpec
from graph.assembly import compile_graph
from core.context import Context
from core.dates import due_phrase
from core.messages import sent_at
from core.text_validation import validate_user_text
from llm.chat_model import offline_notice
from memory.backend import MemoryBackend
from core.errors import InvalidMessage
from core.schemas import ChatRecord, SummaryBoard, utcnow
from memory.chat_admin import forget_user_everywhere, owned_chats, user_thread_ids
from memory.chat_search import chat_query, find_chat, switch_request
from storage import thread_owners
from memory.forgetting import forget_request
from memory import queries as q
from memory.queries import list_chats, list_facts
from storage import chat_runs
from storage.fenced_saver import FencedPostgresSaver

DIM, RESET = "\033[2m", "\033[0m"
HELP = (
    "Commands: /memory /summary /chats /open N|words /new /forget [text] /quit "
    "(or say \"go back to the chat about …\")"
)
YES = {"y", "yes", "ok", "confirm", "approve"}
NO = {"n", "no", "cancel", "decline"}
BUSY = (
    "this chat is busy in another window (a reply is being written there). Your message was not sent; "
    "send it again once that reply is done, or start another chat with /new."
)


@dataclass
class ChatSession:
    backend: MemoryBackend
    user_id: str
    thread_id: str
    interactive: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    context_overrides: dict = field(default_factory=dict)
    confirming_forget: bool = False
    listed: list[ChatRecord] = field(default_factory=list)
    """The chats the last /chats showed, in its numbering (what /open N refers to)."""
    offered: list[ChatRecord] = field(default_factory=list)
    """Chats offered for a switch: one awaits a yes, several a number."""
    background_memory: bool = False
    """Show the reply as soon as it is saved and return, while the turn's memory work (summary,
    extraction) finishes; the next message, command or quit waits for it (a terminal chat)."""
    _memory_work: asyncio.Task | None = None
    failures: int = 0
    """Errors reported so far (a pipe's exit status says whether there were any)."""

    def __post_init__(self) -> None:
        self.context = Context(user_id=self.user_id, **self.context_overrides)

    @cached_property
    def graph(self):
        # The servers' saver, fenced against late writes of a stopped reply (storage.fenced_saver).
        # (Built on first use: the saver wants a running event loop.)
        return compile_graph(FencedPostgresSaver(self.backend.pool), self.backend.store)

    @cached_property
    def runs(self) -> ActiveRuns:
        return ActiveRuns(self.graph, self.backend.pool)

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.thread_id}}

    def error(self, text: str) -> None:
        """An error line on stderr, counted: a pipe run with errors exits non-zero, and says so."""
        self.failures += 1
        print(f"error: {text}", file=self.err, flush=True)

    def note(self, text: str) -> None:
        """A secondary line: dim on a terminal, stderr from a pipe."""
        if self.interactive:
            print(f"{DIM}{text}{RESET}", file=self.out, flush=True)
        else:
            print(text, file=self.err, flush=True)

    async def send(self, text: str) -> str | None:
        """Run one turn; print the reply (streamed on a terminal). Returns the reply text.

        When a task change awaits confirmation, a "yes"/"no" answers it; anything else declines
        the change, says so, and is then sent as a new message (a new message cannot go to a chat
        whose last reply still waits on a tool's answer: the API refuses it with 409 for the same reason).
        """
        await self.settle()
        try:
            text = validate_user_text(text, self.context.max_message_chars)
        except InvalidMessage as exc:
            self.error(str(exc))
            return None
        answer = text.strip().casefold().rstrip(".!")
        if self.confirming_forget:
            self.confirming_forget = False
            if answer in YES:
                counts = await forget_user_everywhere(self.backend, self.user_id)
                self.note(f"Forgot everything about you: {counts}.")
            else:
                self.note("Nothing was deleted.")
            return None
        if self.offered and await self._answer_offer(answer):
            return None
        if (topic := switch_request(text)) is not None:
            await self._offer_switch(topic)
            return None
        if not await self._own_thread():
            return None
        if await self.pending_confirmation() is not None:
            if answer in YES | NO:
                return await self._run(Command(resume={"approved": answer in YES}), "resume")
            self.note("That was not a yes or no, so the task change was not made; your line is sent as a message.")
            if await self._run(Command(resume={"approved": False}), "resume") is None:
                return None
        return await self._run({"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, "message", text)

    async def settle(self) -> None:
        """Wait for the previous turn's memory work (a turn starts only once the one before is whole)."""
        work, self._memory_work = self._memory_work, None
        if work is not None:
            await work

    async def _own_thread(self) -> bool:
        """Record this user as the chat's owner on its first turn; refuse another user's chat."""
        try:
            await thread_owners.claim_ownership(self.backend.pool, self.thread_id, self.user_id)
        except thread_owners.ThreadTaken as exc:
            self.error(f"{exc} Start a new chat with /new.")
            return False
        return True

    async def may_read(self, thread_id: str | None = None) -> bool:
        """Every read of a chat (its summary, its last messages) is held to the rule a message is."""
        try:
            await thread_owners.check_readable(self.backend.pool, thread_id or self.thread_id, self.user_id)
        except thread_owners.ThreadTaken as exc:
            self.error(f"{exc} Start a new chat with /new.")
            return False
        return True

    # ------------------------------------------------------------------ finding and switching chats
    async def _offer_switch(self, topic: str) -> None:
        """Answer "go back to the chat about X": one clear match is offered for a yes, several are listed."""
        found = await find_chat(self.backend.store, self.user_id, chat_query(topic))
        others = [c.chat for c in found.candidates if c.chat.thread_id != self.thread_id]
        if found.outcome == "one" and found.candidates[0].chat.thread_id == self.thread_id:
            self.note(f"You are in that chat already: '{found.candidates[0].chat.title}'.")
        elif found.outcome == "one" or len(others) == 1:
            self.offered = others[:1]
            self.note(f"Switch to {describe(others[0])}? (yes/no)")
        elif others:
            self.offered = others
            self.note(f"Chats that may be about {topic!r}:\n{numbered(others, self.thread_id)}\nWhich one? (a number, or no)")
        else:
            self.note(f"No earlier chat seems to be about {topic!r}. /chats lists them all.")

    async def _answer_offer(self, answer: str) -> bool:
        """True when ``answer`` settled the offer; anything else drops it and is an ordinary message."""
        offered, self.offered = self.offered, []
        if answer in NO:
            self.note("Staying in this chat.")
            return True
        if len(offered) == 1 and answer in YES:
            await self.switch_to(offered[0])
            return True
        if len(offered) > 1 and answer.isdigit() and 1 <= int(answer) <= len(offered):
            await self.switch_to(offered[int(answer) - 1])
            return True
        return False

    async def switch_to(self, chat: ChatRecord) -> None:
        if not await self.may_read(chat.thread_id):
            return
        self.thread_id = chat.thread_id
        self.note(f"Switched to {describe(chat)}.")
        state = await self.graph.aget_state(self.config)
        for m in (state.values.get("messages") or [])[-2:]:
            who = "you" if m.type == "human" else "agent"
            when = sent_at(m)
            stamp = f"[{when.astimezone():%Y-%m-%d %H:%M}] " if when else ""
            text = " ".join(m.text.split())
            self.note(f"  {stamp}{who}> {text[:200]}{'…' if len(text) > 200 else ''}")

    async def pending_confirmation(self) -> dict | None:
        state = await self.graph.aget_state(self.config)
        for interrupt in getattr(state, "interrupts", ()) or ():
            if isinstance(interrupt.value, dict) and interrupt.value.get("type") in ("task_change", "forget"):
                return interrupt.value
        return None

    async def _run(self, graph_input, kind: str, text: str = "") -> str | None:
        """One turn under the chat's run lock: its reply ("" when it said nothing, e.g. only asked to
        confirm a task change); None when it was refused or failed."""
        try:
            run_id = await self.runs.claim_run_slot(self.thread_id, self.user_id, kind)
        except chat_runs.RunInProgress:
            self.error(BUSY)
            return None
        except (psycopg.Error, TimeoutError) as exc:
            await self._report_database_failure(exc, answered=False)
            return None
        spec = TurnSpec(self.thread_id, self.user_id, self.context.persona, kind, graph_input, user_text=text, context=self.context_overrides)
        handle = self.runs.launch(run_id, spec)
        turn = TurnOutput()
        events = asyncio.create_task(self._collect(handle, turn))
        with ctrl_c_stops(handle.runner):
            if self.background_memory:
                replied = asyncio.create_task(handle.runner.replied.wait())
                await asyncio.wait({events, replied}, return_when=asyncio.FIRST_COMPLETED)
                replied.cancel()
            else:
                await events
        if not events.done():  # the reply is saved; its memory work goes on while the user reads and types
            reply = turn.reply(handle.runner.reply_text)
            self._show(reply, turn, stopped=False)
            self._memory_work = asyncio.create_task(self._memory_done(events, handle, turn))
            return reply
        await handle.task  # its bookkeeping too, before the next prompt
        name, data = turn.end
        reply = turn.reply(data.get("reply"))
        if name == "error" and data.get("code") != "stopped":
            if self.interactive and turn.parts:
                print(file=self.out, flush=True)
            await self._report_failure(handle.runner, data)
            return None
        self._show(reply, turn, stopped=name == "error")
        if name == "error":  # stopped by Ctrl-C (or /stop through the API), as the API's stop leaves it
            self.note(data["message"])
            return reply or ""
        for line in turn.memory_lines:
            self.note(f"  remembered: {line}")
        pending = await self.pending_confirmation()
        if pending is not None:
            await self._ask(pending)
        return reply or ""

    async def _collect(self, handle, turn: "TurnOutput") -> None:
        async for name, data in handle.events():
            if name == "token":
                turn.parts.append(data["text"])
                if self.interactive:
                    print(data["text"], end="", file=self.out, flush=True)
            elif name == "memory":
                turn.memory_lines.append(data.get("described") or f"memory not updated: {data.get('error')}")
            elif name in ("done", "interrupt", "error"):
                turn.end = (name, data)

    def _show(self, reply: str | None, turn: "TurnOutput", *, stopped: bool) -> None:
        if self.interactive:
            if not turn.streamed.strip() and reply:  # a model that does not stream, or streamed only blanks
                print(reply, end="", file=self.out)
            print(file=self.out, flush=True)
        elif reply or stopped:
            print((reply or "").replace("\n", " "), file=self.out, flush=True)

    async def _memory_done(self, events: asyncio.Task, handle, turn: "TurnOutput") -> None:
        """The rest of a turn whose reply was shown already: its memory notes, or what failed."""
        await events
        await handle.task
        name, data = turn.end
        if name == "error":
            await self._report_failure(handle.runner, data)
            return
        for line in turn.memory_lines:
            self.note(f"  remembered: {line}")

    async def _ask(self, change: dict) -> None:
        if change.get("type") == "forget":
            items = "; ".join(change.get("items") or []) or change.get("what", "")
            question = f"Confirm: forget {items!r} everywhere (facts, profile, past messages, summaries)? [yes/no]"
        else:
            due = f" (due {due_phrase(change.get('due'), change.get('due_date'))})" if change.get("due") or change.get("due_date") else ""
            question = f"Confirm: {change['action']} task '{change['description']}'{due}? [yes/no]"
        if not self.interactive:
            print(question, file=self.err, flush=True)  # the next input line answers it
            return
        while True:  # on a terminal the question is asked again until it is answered
            try:
                answer = input(f"{question} ").strip().casefold().rstrip(".!")
            except (EOFError, KeyboardInterrupt):
                answer = "no"
            if answer in YES | NO:
                break
            self.note("Please answer yes or no (the task change is made only after a yes).")
        if answer in NO:
            self.note("The task change was not made.")
        await self._run(Command(resume={"approved": answer in YES}), "resume")

    async def _report_failure(self, runner: TurnRunner, event: dict) -> None:
        if isinstance(runner.failure, psycopg.Error):
            await self._report_database_failure(runner.failure, answered=event.get("code") == "memory_update_failed")
        else:
            self.error(str(event.get("message")))

    async def _report_database_failure(self, exc: Exception, *, answered: bool) -> None:
        detail = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        if answered:
            hint = "The reply was saved, but the memories of this turn were not (nothing half-written was kept)."
        else:
            hint = "Nothing half-written was kept; send the message again once the database is back."
        print(file=self.err)
        self.error(f"the database failed during this turn ({detail}). {hint}")

    async def command(self, line: str) -> bool:
        """Handle a slash command. Returns False when the chat should end."""
        await self.settle()  # /memory, /chats, /quit… see the previous turn whole
        name, _, arg = line.strip().partition(" ")
        store = self.backend.store
        if name in ("/quit", "/exit"):
            return False
        if name == "/memory":
            self.note(render_snapshot(await memory_snapshot(store, self.user_id)))
        elif name == "/summary":
            if not await self.may_read():
                return True
            state = await self.graph.aget_state(self.config)
            board = SummaryBoard.model_validate(state.values.get("summary") or {})
            folds = state.values.get("summary_folds", 0)
            self.note(board.render() + f"\n({folds} folds)" if not board.is_empty() else "No summary yet: the whole chat still fits the model's view.")
        elif name == "/chats":
            self.listed = await owned_chats(self.backend.pool, self.user_id, await list_chats(store, self.user_id))
            self.note(numbered(self.listed, self.thread_id) or "No chats yet.")
        elif name == "/open":
            await self._open(arg.strip())
        elif name == "/new":
            self.thread_id = str(uuid.uuid4())
            self.note(f"New chat {self.thread_id}")
        elif name == "/forget":
            await self._forget(arg.strip())
        else:
            self.note(f"Unknown command {name}. {HELP}")
        return True

    async def _open(self, what: str) -> None:
        if not what:
            self.note("Usage: /open N (a number /chats shows) or /open <words about the chat>.")
            return
        if what.isdigit():
            chats = self.listed or await owned_chats(self.backend.pool, self.user_id, await list_chats(self.backend.store, self.user_id))
            if not 1 <= int(what) <= len(chats):
                self.note(f"No chat {what}: /chats numbers them 1 to {len(chats)}." if chats else "No chats yet.")
                return
            await self.switch_to(chats[int(what) - 1])
            return
        found = await find_chat(self.backend.store, self.user_id, chat_query(what))
        if found.outcome == "one":
            await self.switch_to(found.candidates[0].chat)
        elif found.outcome == "several":
            self.offered = [c.chat for c in found.candidates]
            self.note(f"Chats that may be about {what!r}:\n{numbered(self.offered, self.thread_id)}\nWhich one? (a number, or no)")
        else:
            self.note(f"No chat seems to be about {what!r}. /chats lists them all.")

    async def _forget(self, what: str) -> None:
        store = self.backend.store
        if not what:
            # Everything goes, as with the API's forget-me: ask first, saying what.
            facts, tasks = await list_facts(store, self.user_id), (await q.list_tasks(store, self.user_id)).tasks
            threads = await user_thread_ids(self.backend, self.user_id)
            self.note(
                f"This deletes everything about you: profile, preferences, {len(facts)} facts, {len(tasks)} tasks "
                f"and {len(threads)} chats with their histories. Delete it all? (yes/no)"
            )
            self.confirming_forget = True
            return
        # Every copy: the facts, profile fields, preferences and tasks that carry it, the messages
        # that said it (in the index and in every model's view), the summaries and chat records.
        report = await forget_request(store, self.user_id, what)
        self.note(report.describe() if report else f"Nothing remembered matches {what!r}. /memory lists what is.")


@dataclass
class TurnOutput:
    """What a turn's events said: the streamed reply, memory notes, and how it ended."""

    parts: list[str] = field(default_factory=list)
    memory_lines: list[str] = field(default_factory=list)
    end: tuple[str, dict] = ("error", {"code": "turn_failed", "message": "The turn ended without an answer."})

    @property
    def streamed(self) -> str:
        return "".join(self.parts)

    def reply(self, stored: str | None) -> str | None:
        # All the turn said, words around a tool call too; blank streamed text (a model's empty first
        # answer, asked again) gives way to the stored reply, which is never blank.
        # (A turn that only asks to confirm a task may have streamed nothing but spaces: it shows no blank line.)
        return self.streamed.strip() or stored or ""


def _ago(when: datetime, now: datetime) -> str:
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def describe(chat: ChatRecord) -> str:
    return f"'{chat.title}' ({chat.message_count} messages, {_ago(chat.last_activity, utcnow())})"


def numbered(chats: list[ChatRecord], current: str | None = None) -> str:
    """One line per chat, numbered from 1 (what /open N takes); the current chat is starred."""
    now = utcnow()
    return "\n".join(
        f"{i:>2}. {'*' if c.thread_id == current else ' '} {c.title}  ({c.message_count} messages, {_ago(c.last_activity, now)})"
        for i, c in enumerate(chats, start=1)
    )


async def latest_thread(backend: MemoryBackend, user_id: str) -> str | None:
    chats = await owned_chats(backend.pool, user_id, await list_chats(backend.store, user_id))
    return chats[0].thread_id if chats else None


async def run_chat(backend: MemoryBackend, *, user_id: str, chat_id: str | None, new: bool, model: str | None, stdin=None) -> int:
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    thread_id = chat_id or (None if new else await latest_thread(backend, user_id)) or str(uuid.uuid4())
    overrides = {"model": model} if model else {}
    session = ChatSession(backend, user_id, thread_id, interactive, context_overrides=overrides)
    if chat_id and not await session.may_read():
        return 1
    notice = offline_notice(session.context.model)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    if interactive:
        session.note(f"Chat {thread_id} as user {user_id}. {HELP}")
        return await _interactive(session)
    return await _scripted(session, stdin)


async def read_line(prompt: str) -> str:
    """``input(prompt)`` on a daemon thread: the event loop keeps running meanwhile (the last turn's
    memory work finishes while the user types), and quitting never waits for a line."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future = loop.create_future()

    def deliver(value: str | None, exc: BaseException | None) -> None:
        if not line.done():
            line.set_exception(exc) if exc is not None else line.set_result(value)

    def read() -> None:
        try:
            value = input(prompt)
        except BaseException as exc:  # EOFError; KeyboardInterrupt reaches the main thread, not this one
            loop.call_soon_threadsafe(deliver, None, exc)
            return
        loop.call_soon_threadsafe(deliver, value, None)

    threading.Thread(target=read, name="chat-input", daemon=True).start()
    return await line


async def _interactive(session: ChatSession) -> int:
    session.background_memory = True
    while True:
        try:
            line = await read_line("you> ")
        except (EOFError, KeyboardInterrupt, asyncio.CancelledError):
            print(file=session.out)
            try:
                await session.settle()  # the last turn's memory work is not cut off by quitting
            except (KeyboardInterrupt, asyncio.CancelledError):
                pass
            return 0
        if line.startswith("/"):
            if not await session.command(line):
                return 0
            continue
        if line.strip():
            print("agent> ", end="", file=session.out, flush=True)
            await session.send(line)


async def _scripted(session: ChatSession, stdin) -> int:
    buffer = getattr(stdin, "buffer", None)
    lines = iter(buffer) if buffer is not None else (l.encode("utf-8") for l in stdin)
    for number, raw in enumerate(lines, start=1):
        raw = raw.rstrip(b"\r\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            session.error(f"line {number} is not valid UTF-8 (byte {exc.start}); skipped")
            continue
        if line.startswith("/"):
            if not await session.command(line):
                break
            continue
        await session.send(line)
    if await session.pending_confirmation() is not None:
        session.note("The input ended before the confirmation was answered: the task change was not made (the chat still asks it).")
    if session.failures:
        print(f"error: {session.failures} of what was sent failed (said above), so the exit status is 1", file=session.err, flush=True)
        return 1
    return 0


@contextmanager
def ctrl_c_stops(runner: TurnRunner):
    """While a reply runs, Ctrl-C (SIGINT) stops the reply instead of the program; afterwards
    the handler from before is back, so Ctrl-C at the prompt quits (asyncio.run's handler cancels
    the prompt's wait, read on a thread; Python's default would raise anywhere in the loop)."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, runner.stop, "stopped by the user (Ctrl-C)")
    except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no signals here
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)  # this sets Python's default handler...
        if previous is not None:
            signal.signal(signal.SIGINT, previous)  # ...so the one before is put back
