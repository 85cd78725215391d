"""`memory-agent chat`: an interactive chat on a terminal, or one message per line from a pipe.

On a terminal (the line editor is ``app.cli.chat_line``) replies stream token by token and a dim
line shows what was remembered. From a pipe each input line is one message and each reply is printed
on one stdout line (notes go to stderr), so scripts and tests can drive it. Log records go to the
chat's log file either way (``app.cli.chat_logging``), not into the conversation.

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
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Awaitable, Callable, TextIO

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from app.runs.active_runs import ActiveRuns
from app.cli.chat_list import describe, numbered
from app.cli.memory_report import memory_snapshot, render_snapshot
from app.cli.terminal_text import counted, shown, what_was_forgotten
from app.runs.turn_runner import TurnRunner, TurnSpec
from graph.assembly import compile_graph
from core.context import Context
from core.dates import due_phrase
from core.messages import sent_at, stamp_sent_at
from core.namespaces import InvalidThreadId
from core.text_validation import validate_user_text
from memory.backend import MemoryBackend
from core.errors import InvalidMessage
from core.schemas import ChatRecord, SummaryBoard
from storage.chat_imports import ImportInProgress
from memory.chat_admin import forget_user_everywhere
from storage import thread_owners
from memory.forgetting import forget_request
from memory import queries as q
from memory.queries import chat_query, find_chat, import_states, list_chats, list_facts, owned_chats, redactor_for, shown_state, switch_request, user_thread_ids
from storage import chat_runs
from storage.fenced_saver import FencedPostgresSaver

DIM, RESET = "\033[2m", "\033[0m"
COMMANDS = (
    ("/help", "this list"),
    ("/memory", "what is remembered about you: profile, preferences, facts, tasks"),
    ("/summary", "this chat's running summary"),
    ("/chats", "your chats, numbered"),
    ("/open N|words", "go to chat N of /chats, or to the chat about those words"),
    ("/new", "start a new chat"),
    ("/regenerate", "answer your last message again (memory learns from the new answer, also after a stop)"),
    ("/forget [text]", "forget what the text says, every copy of it; alone: everything about you, after a yes"),
    ("/quit", "leave (also /exit or Ctrl-D)"),
)
HELP = f"Commands: {' '.join(name for name, _ in COMMANDS)} (or say \"go back to the chat about …\")"
TERMINAL_KEYS = (
    "On a terminal: Up/Down recall earlier lines; a paste is one message, however many lines; "
    "Esc then Enter starts a new line; Ctrl-C stops a reply, and at the prompt quits."
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
    ask_line: Callable[[str], Awaitable[str]] | None = None
    """How a terminal asks a question (the chat line's prompt); None: ``input()``."""
    on_forget_all: list[Callable[[], None]] = field(default_factory=list)
    """Called once everything about the user was forgotten (the chat line drops its history of them)."""
    on_forget_words: list[Callable[[Any], None]] = field(default_factory=list)
    """Called with the user's redactor after a /forget (the chat line drops the typed lines that carry it)."""

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
        print(f"error: {shown(text)}", file=self.err, flush=True)

    def note(self, text: str) -> None:
        """A secondary line: dim on a terminal, stderr from a pipe."""
        if self.interactive:
            print(f"{DIM}{shown(text)}{RESET}", file=self.out, flush=True)
        else:
            print(shown(text), file=self.err, flush=True)

    def drop_forget_question(self) -> None:
        """A line that does not answer "Delete it all?" ends the question: nothing is deleted."""
        if self.confirming_forget:
            self.confirming_forget = False
            self.note("Forgetting everything was not confirmed, so nothing was deleted.")

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
            self.drop_forget_question()  # only this very line answers "Delete it all?", even one refused
            self.error(str(exc))
            return None
        answering_forget, self.confirming_forget = self.confirming_forget, False
        answer = text.strip().casefold().rstrip(".!")
        if answering_forget:
            if answer in YES:
                counts = await forget_user_everywhere(self.backend, self.user_id)
                for forgotten in self.on_forget_all:
                    forgotten()
                self.note(f"Forgot everything about you: {what_was_forgotten(counts)}.")
                return None
            if answer in NO:
                self.note("Nothing was deleted.")
                return None
            # As with a task change: a line that is not a yes or no declines, and is sent.
            self.note("That was not a yes or no, so nothing was deleted; your line is sent as a message.")
        if self.offered and await self._answer_offer(answer):
            return None
        if (topic := switch_request(text)) is not None:
            await self._offer_switch(topic)
            return None
        if not await self._own_thread():
            return None
        if (pending := await self.pending_confirmation()) is not None:
            if answer in YES | NO:
                return await self._resume(pending, answer in YES)
            self.note(f"That was not a yes or no, so {not_made(pending)}; your line is sent as a message.")
            if await self._run(Command(resume={"approved": False}), "resume") is None:
                return None
        return await self._run({"messages": [stamp_sent_at(HumanMessage(text, id=str(uuid.uuid4())))]}, "message", text)  # dated when sent: a stopped turn keeps it

    async def settle(self) -> None:
        """Wait for the previous turn's memory work (a turn starts only once the one before is whole)."""
        work, self._memory_work = self._memory_work, None
        if work is not None:
            await work

    async def _own_thread(self) -> bool:
        """Record this user as the chat's owner on its first turn; refuse another user's chat."""
        try:
            await thread_owners.claim_ownership(self.backend.pool, self.thread_id, self.user_id)
        except (thread_owners.ThreadTaken, InvalidThreadId) as exc:
            self.error(f"{exc} Start a new chat with /new.")
            return False
        return True

    async def may_read(self, thread_id: str | None = None) -> bool:
        """Every read of a chat (its summary, its last messages) is held to the rule a message is."""
        try:
            await thread_owners.check_not_anothers(self.backend.pool, thread_id or self.thread_id, self.user_id)
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
        if len(offered) > 1 and (n := chat_number(answer)) is not None and 1 <= n <= len(offered):
            await self.switch_to(offered[n - 1])
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

    async def _run(self, graph_input, kind: str, text: str = "", *, fork_from: dict | None = None) -> str | None:
        """One turn under the chat's run lock: its reply ("" when it said nothing, e.g. only asked to
        confirm a task change); None when it was refused or failed.

        ``graph_input`` may be a coroutine function, called once the lock is held, that returns
        (graph input, text, fork point): a regeneration reads the chat under the lock, as the API does.
        """
        try:
            run_id = await self.runs.claim_run_slot(self.thread_id, self.user_id, kind)
        except chat_runs.RunInProgress:
            self.error(BUSY)
            return None
        except ImportInProgress as exc:
            self.error(str(exc))
            return None
        except (psycopg.Error, TimeoutError) as exc:
            await self._report_database_failure(exc, answered=False)
            return None
        if callable(graph_input):
            try:
                graph_input, text, fork_from = await graph_input()
            except BaseException as exc:
                await asyncio.shield(chat_runs.finish(self.backend.pool, run_id, "released"))
                if isinstance(exc, NothingToRegenerate):
                    self.note(str(exc))
                    return None
                raise
        spec = TurnSpec(
            self.thread_id, self.user_id, self.context.persona, kind, graph_input,
            fork_from=fork_from, user_text=text, context=self.context_overrides,
        )  # fmt: skip
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
            self.note(data["message"] + (" Type /regenerate for that." if "regenerate it" in data["message"] else ""))
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
                    print(shown(data["text"]), end="", file=self.out, flush=True)
            elif name == "replaced":  # the reply node kept another answer than the one streamed
                withdrawn = turn.replace(data["withdrawn"], data["text"])
                if self.interactive:
                    if withdrawn.strip():
                        print(file=self.out)
                        self.note("(That answer was withdrawn; the reply is:)")
                    print(shown(data["text"]), end="", file=self.out, flush=True)
            elif name == "memory":
                if line := memory_line(data):
                    turn.memory_lines.append(line)
            elif name in ("done", "interrupt", "error"):
                turn.end = (name, data)

    def _show(self, reply: str | None, turn: "TurnOutput", *, stopped: bool) -> None:
        if self.interactive:
            if not turn.streamed.strip() and reply:  # a model that does not stream, or streamed only blanks
                print(shown(reply), end="", file=self.out)
            print(file=self.out, flush=True)
        elif reply or stopped:
            print(shown((reply or "").replace("\n", " ")), file=self.out, flush=True)

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
            print(shown(question), file=self.err, flush=True)  # the next input line answers it
            return
        while True:  # on a terminal the question is asked again until it is answered
            try:
                line = await self.ask_line(f"{shown(question)} ") if self.ask_line else input(f"{shown(question)} ")
                answer = line.strip().casefold().rstrip(".!")
            except (EOFError, KeyboardInterrupt):
                answer = "no"
            if answer in YES | NO:
                break
            only_after = "nothing is forgotten without a yes" if is_forget(change) else "the task change is made only after a yes"
            self.note(f"Please answer yes or no ({only_after}).")
        if answer in NO:
            declined = not_made(change)
            self.note(f"{declined[0].upper()}{declined[1:]}.")
        await self._resume(change, answer in YES)

    async def _resume(self, change: dict, approved: bool):
        """Answer the pending confirmation; a forget confirmed in the user's own words drops the typed
        lines that carry it from the line history, as /forget does."""
        out = await self._run(Command(resume={"approved": approved}), "resume")
        if approved and change.get("type") == "forget":
            await self._forgot_words()
        return out

    async def _forgot_words(self) -> None:
        if self.on_forget_words:
            redactor = await redactor_for(self.backend.store, self.user_id)
            for forgotten in self.on_forget_words:
                forgotten(redactor)

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
        if name == "/forget" and not arg.strip():
            self.confirming_forget = False  # asked again below
        self.drop_forget_question()  # only the very next line answers "Delete it all?"
        store = self.backend.store
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            width = max(len(n) for n, _ in COMMANDS)
            lines = [f"  {n:<{width}}  {what}" for n, what in COMMANDS]
            extra = [TERMINAL_KEYS] if self.interactive else []
            self.note("\n".join(["Commands:", *lines, 'Or say "go back to the chat about …" to find a chat.', *extra]))
        elif name == "/regenerate":
            if not await self.may_read():
                return True
            if (pending := await self.pending_confirmation()) is not None:
                self.note(f"{'A forget' if is_forget(pending) else 'A task change'} waits for your yes or no; answer it first.")
            else:
                await self._run(self._regeneration, "regenerate")
        elif name == "/memory":
            self.note(render_snapshot(await memory_snapshot(store, self.user_id)))
        elif name == "/summary":
            if not await self.may_read():
                return True
            state = await self.graph.aget_state(self.config)
            values = shown_state(state.values, await redactor_for(store, self.user_id))
            board = SummaryBoard.model_validate(values.get("summary") or {})
            folds = values.get("summary_folds", 0)
            self.note(board.render() + f"\n({folds} folds)" if not board.is_empty() else "No summary yet: the whole chat still fits the model's view.")
        elif name == "/chats":
            self.listed = await owned_chats(self.backend.pool, self.user_id, await list_chats(store, self.user_id))
            imports = await import_states(self.backend.pool, self.user_id, (c.thread_id for c in self.listed))
            self.note(numbered(self.listed, self.thread_id, imports) or "No chats yet.")
        elif name == "/open":
            await self._open(arg.strip())
        elif name == "/new":
            self.thread_id = str(uuid.uuid4())
            self.note(f"New chat {self.thread_id}")
        elif name == "/forget":
            await self._forget(arg.strip())
        else:
            self.error(f"Unknown command {name}. {HELP}")  # counted: a script that sent it exits 1
        return True

    async def _regeneration(self) -> tuple[dict, str, dict]:
        """The last reply's question and the fork point before it: the API's own regenerate path
        (app.http.routes_chats: question_of, checkpoint_before), imported only when used."""
        from app.http.errors import ApiError
        from app.http.routes_chats import checkpoint_before, question_of

        messages = (await self.graph.aget_state(self.config)).values.get("messages") or []
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage) and not m.tool_calls), None)
        if last is None:
            raise NothingToRegenerate("Nothing to regenerate yet: this chat has no reply.")
        try:
            human = await question_of(self.graph, self.thread_id, last.id)
            base = await checkpoint_before(self.graph, self.thread_id, human.id, to="regenerate this reply")
        except ApiError as exc:
            raise NothingToRegenerate(exc.message) from exc
        if self.interactive:
            print("agent> ", end="", file=self.out, flush=True)
        # The same message (same id) again: only the reply is new.
        return {"messages": [human]}, human.text, base

    async def _open(self, what: str) -> None:
        if not what:
            self.note("Usage: /open N (a number /chats shows) or /open <words about the chat>.")
            return
        if (n := chat_number(what)) is not None:
            chats = self.listed or await owned_chats(self.backend.pool, self.user_id, await list_chats(self.backend.store, self.user_id))
            if not 1 <= n <= len(chats):
                self.note(f"No chat {what[:20]}{'…' if len(what) > 20 else ''}: /chats numbers them 1 to {len(chats)}." if chats else "No chats yet.")
                return
            await self.switch_to(chats[n - 1])
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
                f"This deletes everything about you: profile, preferences, {counted(len(facts), 'fact')}, {counted(len(tasks), 'task')} "
                f"and {counted(len(threads), 'chat')} with their histories. Delete it all? (yes/no)"
            )
            self.confirming_forget = True
            return
        # Every copy: the facts, profile fields, preferences and tasks that carry it, the messages
        # that said it (in the index and in every model's view), the summaries and chat records.
        try:
            report = await forget_request(store, self.user_id, what)
        except InvalidMessage as exc:  # too long to name one thing: nothing was forgotten
            self.error(str(exc))
            return
        if report is not None:
            await self._forgot_words()
        self.note(report.describe() if report else f"Nothing remembered matches {what!r}. /memory lists what is.")


def chat_number(text: str) -> int | None:
    """``text`` as a number of a chat list, or None when it is not a number. Decimal digits of any
    script count ("٤"); "²" is a digit int() refuses, and a number too long for int() (4,300
    digits) is no chat's either: 0."""
    if not text.isdecimal():
        return None
    return int(text) if len(text) <= 18 else 0


def is_forget(change: dict) -> bool:
    """Whether a pending confirmation asks to forget something (else it is a task change)."""
    return change.get("type") == "forget"


def not_made(change: dict) -> str:
    """What a declined (or unanswered) confirmation leaves, in the words of what it asked."""
    return "nothing was forgotten" if is_forget(change) else "the task change was not made"


def memory_line(event: dict) -> str | None:
    """The dim line a ``memory`` event shows under the reply; None when it changed nothing to say
    (a repeat of what was known: it printed "memory not updated: None")."""
    if event.get("described"):
        return event["described"]
    if event.get("error"):
        return f"memory not updated: {event['error']}"
    taken = event.get("retracted") or {}
    items = [*taken.get("facts", []), *taken.get("tasks", []), *taken.get("fields", [])]
    return f"taken back with the old branch: {'; '.join(items)}" if items else None


class NothingToRegenerate(Exception):
    """The chat has no reply a regeneration could replace (the message says why)."""


@dataclass
class TurnOutput:
    """What a turn's events said: the streamed reply, memory notes, and how it ended."""

    parts: list[str] = field(default_factory=list)
    memory_lines: list[str] = field(default_factory=list)
    end: tuple[str, dict] = ("error", {"code": "turn_failed", "message": "The turn ended without an answer."})

    @property
    def streamed(self) -> str:
        return "".join(self.parts)

    def replace(self, withdrawn: str, text: str) -> str:
        """``text`` in place of the streamed ``withdrawn`` (the end of what streamed); what was withdrawn."""
        streamed = self.streamed
        kept = streamed[: len(streamed) - len(withdrawn)] if withdrawn and streamed.endswith(withdrawn) else streamed
        self.parts = [kept, text]
        return withdrawn

    def reply(self, stored: str | None) -> str | None:
        # All the turn said, words around a tool call too; blank streamed text (a model's empty first
        # answer, asked again) gives way to the stored reply, which is never blank.
        # (A turn that only asks to confirm a task may have streamed nothing but spaces: it shows no blank line.)
        return self.streamed.strip() or stored or ""


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
