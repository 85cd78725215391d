"""Running an import: one unit of work with its owner, that forget-me and deletion win over.

The chat's owner row and its import row (``storage.chat_imports``) are written in one
transaction, then the chat's record; each exchange (the user's message(s) and the assistant
message(s) after them) is written as if the ``reply`` node had produced it
(``update_state(..., as_node="reply")``) and the graph goes on, so the memory phase
(``graph.assembly.MEMORY_PHASE``) and every step after ``reply`` run exactly as after a chat turn. After
each exchange the row records how far the import got and the checkpoint it ended on.

While the exchanges run, the importer beats its row every ``BEAT_SECONDS`` and reads it:

* **cancelled** (forget-me or the chat's deletion flipped it, or removed it): the exchanges are
  stopped at once, the thread is fenced against late writes of this process, and everything
  of the chat is removed (checkpoints, record, index rows, run rows, owner and import rows);
  :class:`ImportCancelled`. An importer that missed the signal finds its progress refused at
  its next exchange and does the same;
* **the client left** (``stop_when``), a failure, or the caller was cancelled (Ctrl-C): the
  exchange under way is taken back to the last complete one, and the chat stays, marked
  ``incomplete`` (:class:`ImportStopped` / ``ImportFailed``). A killed process leaves the same:
  its row's heartbeat stops and it reads as incomplete.

An incomplete import is resumed with the same history (``resume=<chat id>``; the digest must
match): what a killed importer wrote past its last complete exchange is taken back and the
import goes on from there. Message ids are derived from the chat id and the message's
position, so an exchange done twice writes the same messages (the index skips known ids).

A conversation imported before that has grown since (a newer export) gets its new exchanges on its
existing chat (:meth:`_Job.extend`), under an import row as above; its chat was complete before,
so a stop leaves it complete and taking messages (the row goes), and a cancellation takes back
only what the new messages taught.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from types import SimpleNamespace
from typing import Awaitable, Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

import prompts
from core.context import Context
from core.errors import MemoryAgentError
from core.messages import stamp_sent_at
from core.schemas import NEW_CHAT_TITLE, ChatRecord
from memory.writer.forgets import delete_taught_only_by_chat
from embeddings.batching import in_background
from memory import episodes
from memory.chat_admin import DELETED, delete_chat, rewrite_chat_text, write_empty_chat
from memory.chat_import import ChatImport, ImportedChat, ImportedMessage, ImportFailed, Progress, exchanges, prepare_import
from memory.writer.records import create_chat_record, save_chat_record
from memory.queries import get_chat
from storage import chat_imports, chat_sources, owner_forgets
from storage.checkpoint_rows import ThreadMark, mark_thread, rollback_thread

log = logging.getLogger(__name__)

BOOKKEEPING_SECONDS = 5.0  # one beat or progress write; past this the database is taken for gone
_IDS = uuid.UUID("6f1c2a7e-3c55-4b8e-9a43-1d2f9c7b0a11")


class ImportCancelled(MemoryAgentError):
    """The chat was deleted, or its owner forgotten, during the import: nothing of it is kept."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        super().__init__(f"The import into chat {chat_id} was cancelled (the chat was deleted or its owner forgotten); nothing of it is kept.")


class ImportStopped(ImportFailed):
    """Stopped before the end (the client left, Ctrl-C): the chat holds the complete exchanges, marked incomplete."""


class _Revoked(Exception):
    """The import's row refused progress: cancelled, deleted or taken over."""


def message_id(thread_id: str, index: int) -> str:
    return str(uuid.uuid5(_IDS, f"{thread_id}:{index}"))


def _same_prefix(thread_id: str, held: list[BaseMessage], messages: list[ImportedMessage]) -> int:
    """How many messages, from the first, the chat holds as the import wrote them: its ids by
    position, the same role and text."""
    n = 0
    for i, (m, source) in enumerate(zip(held, messages)):
        if m.id != message_id(thread_id, i) or m.type != ("human" if source.role == "user" else "ai") or m.content != source.text:
            break
        n += 1
    return n


def _why_not_added(thread_id: str, held: list[BaseMessage], messages: list[ImportedMessage], same: int) -> tuple[str, str]:
    """Why a grown conversation's new messages cannot go on its chat: a code and a sentence."""
    again = "delete the chat and import again to take them"
    written = same < len(held) and held[same].id == message_id(thread_id, same)  # the import wrote it: its text is not the export's
    if written and held[same].text == DELETED:
        return "chat_changed", f"The export holds messages the chat lacks, but the chat's message {same + 1} was deleted since it was imported: {again}."
    if written:
        return "message_differs", (f"The export holds messages the chat lacks, but its message {same + 1} differs from the chat's "
                                   f"(edited here, or where it came from): {again}.")
    return "chat_changed", (f"The export holds messages the chat lacks, but the chat changed since it was imported (a message deleted "
                            f"or added here): {again}.")


def _why_not_now(row: chat_imports.ImportRow, digest: str) -> tuple[str, str] | None:
    """Why a grown conversation's new messages are not added while its chat has ``row``, an import of
    another importer: a code and a sentence; None when there is nothing to tell (a deletion under way, or
    the first import of this same export running: its messages are on the way)."""
    if row.state == "running" and row.extends_chat:
        if row.digest == digest:
            return "import_in_progress", ("Another import is adding this conversation's new messages to the chat now, from this same export: "
                                          "nothing more to do (should it stop part way, importing the export again adds the rest).")
        return "import_in_progress", ("Another import is adding this conversation's new messages to the chat now, from another export: "
                                      "import this export again when it has ended, to add what that one lacks.")
    if row.state == "running" and row.digest != digest:  # the conversation's first import, of another export, under way
        return "import_in_progress", ("Another import is importing this conversation into the chat now, from another export: "
                                      "import this export again when it has ended, to add what that one lacks.")
    if row.state == "incomplete" and not row.extends_chat:  # (of another history: the same one was resumed)
        return "import_incomplete", (
            f"The chat's import of this conversation from another export stopped part way ({row.imported} of {row.total} messages): "
            f"finish it first, by importing that export again or resuming it with its history (`memory-agent import FILE --resume "
            f"{row.thread_id}` or POST /chats/import?resume={row.thread_id}), then import this export again to add the new messages; "
            "or delete the chat and import this export."
        )
    return None


def importer_id() -> str:
    """This importer, uniquely (a resume elsewhere takes the row; this one's writes are then refused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _message(m: ImportedMessage, mid: str) -> BaseMessage:
    cls = HumanMessage if m.role == "user" else AIMessage
    return stamp_sent_at(cls(m.text, id=mid), m.time)


async def import_chat(
    graph, pool, user_id: str, chat: ChatImport, *,
    context: Context | None = None, on_progress: Progress | None = None, resume: str | None = None,
    stop_when: Callable[[], Awaitable[bool]] | None = None, known_generation: int | None = None,
    on_chat: Callable[[str, bool], None] | None = None,
) -> ImportedChat:
    """Import ``chat`` into a new chat of ``user_id`` on the compiled ``graph`` (with its checkpointer
    and store), or go on with the incomplete import of chat ``resume``.

    The messages are checked here, whatever the caller checked before (InvalidImport, nothing
    written): ~25 ms for 5,000 messages of 17 MB, so a caller cannot skip the checks by passing a digest.
    ``stop_when``: polled every beat; True stops the import, keeping it incomplete (a client that left).
    ``known_generation``: the user's :func:`storage.chat_imports.owner_generation` when the caller was
    authenticated (a request whose body arrives after); OwnerForgotten, nothing written, when the user
    was forgotten since. None: the caller is known now (the CLI).
    ``on_chat``: told the chat's id once the import has one (an interrupted import is resumed by it),
    and whether the import adds a grown conversation's new messages to its chat (one interrupted
    leaves the chat taking messages, and goes on when the export is imported again).
    """
    ctx = context or Context(user_id=user_id)
    if ctx.user_id != user_id:
        raise ValueError("the context's user_id must be the importing user")
    digest = prepare_import(chat, ctx.max_message_chars)
    if ctx.persona not in prompts.personas():  # the chat's record would refuse it after the import's rows were written
        raise ValueError(f"Unknown persona {ctx.persona!r}; choose one of: {', '.join(prompts.personas())}.")
    job = _Job(graph, pool, user_id, chat, ctx, digest, on_progress, known_generation)
    try:
        await (job.take_over(resume) if resume else job.begin())
    except chat_sources.AlreadyImported as exc:  # nothing written
        await job.take_back_extension(exc.thread_id)  # (an extension whose importer died: the chat as it was before it)
        try:
            await job.take_over(exc.thread_id)  # its import stopped part way: go on with it
        except chat_imports.NotResumable:  # imported already: its new exchanges, if it grew since
            nothing_added = await job.extend(exc.thread_id)
            if nothing_added is not None:
                return nothing_added
    if on_chat is not None:
        on_chat(job.thread_id, job.extends_chat)
    return await job.run(stop_when)


class _Job:
    def __init__(
        self, graph, pool, user_id: str, chat: ChatImport, ctx: Context, digest: str, on_progress: Progress | None, known_generation: int | None
    ) -> None:
        self.graph, self.pool, self.user_id, self.chat, self.ctx, self.digest = graph, pool, user_id, chat, ctx, digest
        self.on_progress, self.known_generation = on_progress, known_generation
        self.groups = exchanges(chat.messages)
        self.worker = importer_id()
        self.import_id = ""
        self.thread_id = ""
        self.title = ""
        self.start = 0  # exchanges done before this run
        self.head: ThreadMark | None = None  # where the last complete exchange ended
        self.record_at_head: ChatRecord | None = None  # the chat's record as that exchange left it
        self.result: ImportedChat | None = None
        self.extends_chat = False  # adds a grown conversation's new messages to its complete chat (extend)

    # ------------------------------------------------------------------ starting
    async def begin(self) -> None:
        title = (self.chat.title or "").strip()
        record = self._record(str(uuid.uuid4()), title)
        self.thread_id, self.title = record.thread_id, record.title
        self.import_id = await chat_imports.begin(
            self.pool, record.thread_id, self.user_id, total=len(self.chat.messages), digest=self.digest, worker=self.worker,
            source_id=self.chat.source_id, known_generation=self.known_generation,
        )
        try:
            await create_chat_record(self.graph.store, self.user_id, record)
        except BaseException:
            await asyncio.shield(self._mark_incomplete("the chat's record could not be written"))
            raise
        self._new_result(imported=0)

    async def take_over(self, thread_id: str) -> None:
        row = await chat_imports.take_over(
            self.pool, thread_id, self.user_id, digest=self.digest, worker=self.worker, known_generation=self.known_generation
        )
        self.thread_id, self.import_id, self.start = thread_id, row.import_id, row.exchanges_done
        # A killed importer may have written part of an exchange past the last complete one.
        mark = ThreadMark(thread_id, row.head_checkpoint, frozenset(row.head_writes))
        await rollback_thread(self.pool, mark)
        self.head = mark if row.head_checkpoint is not None else None
        record = await get_chat(self.graph.store, self.user_id, thread_id)
        if record is None:  # killed between its rows and its record: the chat is listed from now on
            title = (self.chat.title or "").strip()
            record = self._record(thread_id, title)
            await create_chat_record(self.graph.store, self.user_id, record)
        self.title = record.title
        self._new_result(imported=row.imported)

    async def take_back_extension(self, thread_id: str) -> None:
        """An extension of ``thread_id`` whose importer died: the chat back to its last whole exchange,
        its index and text with it, and the row gone, so the chat takes messages again and this
        import extends it from there (nothing when the chat has no such row)."""
        row = await chat_imports.take_back_extension(self.pool, thread_id, self.user_id, worker=self.worker, known_generation=self.known_generation)
        if row is None:
            return
        await rollback_thread(self.pool, ThreadMark(thread_id, row.head_checkpoint, frozenset(row.head_writes)))
        values = (await self.graph.aget_state({"configurable": {"thread_id": thread_id}})).values
        await episodes.index_for_run(self.graph.store, self.user_id, thread_id, values.get("messages", []))
        await rewrite_chat_text(self.graph.store, self.user_id, thread_id, values)
        if not await chat_imports.finish(self.pool, row.import_id, self.worker):
            if await chat_imports.beat(self.pool, row.import_id, self.worker) == "taken":
                return  # (this took over 10 s, and another import took it back in turn: extend sees its row)
            await chat_imports.drop(self.pool, row.import_id)  # a deletion or forget-me meanwhile: it removes the chat
            raise ImportCancelled(thread_id)

    async def extend(self, thread_id: str) -> ImportedChat | None:
        """The conversation was imported into ``thread_id`` before. When it grew since (a newer export)
        and the chat still holds what was imported, its new messages go on the end of the chat (None:
        run the job); a chat whose import ended on a message with no reply has that exchange done
        again, whole (the same ids: the messages are replaced by themselves). Otherwise what the
        caller is told, nothing written: imported already, or ``not_added`` with why."""
        nothing = ImportedChat(chat_id=thread_id, title=(self.chat.title or "").strip(), messages=0, exchanges=0, already_imported=True)
        starts = [sum(len(g) for g in self.groups[:k]) for k in range(len(self.groups))]  # each exchange's first message
        for attempt in (1, 2):  # twice: a turn may end between the look and the row
            mark = await mark_thread(self.pool, thread_id)
            held = (await self.graph.aget_state({"configurable": {"thread_id": thread_id}})).values.get("messages", [])
            same = _same_prefix(thread_id, held, self.chat.messages)
            if same == len(self.chat.messages) or any(m.id == message_id(thread_id, len(self.chat.messages) - 1) for m in held):
                return nothing  # an older export, or the same one: the chat holds its last message's place (a deleted one keeps its id)
            if await self._held_by_another_import(thread_id, nothing):
                return nothing
            if mark.checkpoint_id is None or same < len(held) or not held:
                nothing.not_added, nothing.not_added_reason = _why_not_added(thread_id, held, self.chat.messages, same)
                return nothing
            start = max(k for k, first in enumerate(starts) if first <= same)  # the exchange the new messages begin (or end)
            try:
                self.import_id = await chat_imports.begin_extension(
                    self.pool, thread_id, self.user_id, total=len(self.chat.messages), imported=starts[start], exchanges_done=start,
                    head_checkpoint=mark.checkpoint_id, head_writes=mark.head_writes, digest=self.digest, worker=self.worker,
                    known_generation=self.known_generation,
                )
            except chat_imports.ChatBusy:
                if attempt == 2:  # told, and the export's other conversations go on
                    nothing.not_added = "chat_busy"
                    nothing.not_added_reason = "A reply is running on the chat: import the export again when it has ended to add its new messages."
                    return nothing
                continue
            except chat_imports.NotResumable:  # another importer's row since the look (the same export twice at once)
                await self._held_by_another_import(thread_id, nothing)
                return nothing
            break
        self.thread_id, self.start, self.head, self.extends_chat = thread_id, start, mark, True
        record = await get_chat(self.graph.store, self.user_id, thread_id)
        if record is None:  # (a completed import has its record; a chat's record is rebuilt as for a resume)
            record = self._record(thread_id, (self.chat.title or "").strip())
            await create_chat_record(self.graph.store, self.user_id, record)
        self.title, self.record_at_head = record.title, record
        self._new_result(imported=starts[start])
        # What this import adds: the messages after the chat's, from the first new one's time.
        self.result.held_before, self.result.exchanges = same, len(self.groups) - start
        self.result.first_time = self.chat.messages[same].time
        return None

    async def _held_by_another_import(self, thread_id: str, nothing: ImportedChat) -> bool:
        """Whether the chat has an import row (another importer's: this one has none yet); ``nothing``
        then says why the new messages are not added, when there is something to tell: one adding
        them now (or the first import of another export), or an incomplete import of another export. (A first
        import of this same export running, its messages on the way, says nothing, as before.)"""
        row = (await chat_imports.of_threads(self.pool, self.user_id, [thread_id])).get(thread_id)
        if row is None:
            return False
        why = _why_not_now(row, self.digest)
        if why is not None:
            nothing.not_added, nothing.not_added_reason = why
        return True

    def _record(self, thread_id: str, title: str) -> ChatRecord:
        # Created when the conversation started (an export's time), not when it was imported.
        return ChatRecord(thread_id=thread_id, title=title or NEW_CHAT_TITLE, title_by_user=bool(title), persona=self.ctx.persona,
                          created_at=self.chat.created_at or self.chat.messages[0].time)

    def _new_result(self, imported: int) -> None:
        msgs = self.chat.messages
        self.result = ImportedChat(
            chat_id=self.thread_id, title=self.title, messages=imported, exchanges=len(self.groups),
            first_time=msgs[0].time, last_time=msgs[-1].time,
        )

    # ------------------------------------------------------------------ running
    async def run(self, stop_when: Callable[[], Awaitable[bool]] | None) -> ImportedChat:
        with in_background():  # nobody waits on an import's embeddings as on a reply's (embeddings.batching)
            work = asyncio.create_task(self._exchanges(), name=f"import-{self.thread_id}")
        why = None
        try:
            while why is None and not work.done():
                await asyncio.wait({work}, timeout=chat_imports.BEAT_SECONDS)
                if work.done():
                    break
                why = await self._why_stop(stop_when)
        except BaseException:  # the caller was cancelled (Ctrl-C, a cancelled request)
            await asyncio.shield(self._stop(work, "the import was interrupted"))
            raise
        if why is None and work.done() and isinstance(work.exception(), _Revoked) and await self._row_state() == "taken":
            why = "taken"
        if why == "taken":  # another import has the row and the chat now: stop here, and remove nothing of it
            await asyncio.shield(self._let_go(work))
            raise self._taken()
        if why == "cancelled" or (work.done() and isinstance(work.exception(), _Revoked)):
            await asyncio.shield(self._undo(work))
            raise ImportCancelled(self.thread_id)
        if why is not None:
            if not await asyncio.shield(self._stop(work, why)):
                raise self._taken()
            raise self._failure(ImportStopped, why)
        if work.exception() is not None and not isinstance(work.exception(), owner_forgets.OwnerForgotten) and await self._row_state() == "taken":
            await asyncio.shield(self._let_go(work))
            raise self._taken()
        if work.exception() is not None and (isinstance(work.exception(), owner_forgets.OwnerForgotten) or await self._cancelled_meanwhile()):
            # (A deletion can make an exchange fail before the next beat sees the row, and forget-me
            # refuse its next write (storage.owner_forgets) before it cancels the row: a cancellation still.)
            await asyncio.shield(self._undo(work))
            raise ImportCancelled(self.thread_id)
        if work.exception() is not None:
            exc = work.exception()
            detail = f"{type(exc).__name__}: {exc}"
            if not await asyncio.shield(self._stop(work, detail)):
                raise self._taken() from exc
            raise self._failure(ImportFailed, detail) from exc
        if not await chat_imports.finish(self.pool, self.import_id, self.worker):  # cancelled (or taken) at the very end
            if await self._row_state() == "taken":
                raise self._taken()
            await asyncio.shield(self._undo(work))
            raise ImportCancelled(self.thread_id)
        record = await get_chat(self.graph.store, self.user_id, self.thread_id)
        if record is not None:  # the title its first exchange gave it (it said "New chat")
            self.result.title = record.title
        return self.result

    async def _why_stop(self, stop_when) -> str | None:
        try:
            state = await asyncio.wait_for(chat_imports.beat(self.pool, self.import_id, self.worker), BOOKKEEPING_SECONDS)
        except Exception as exc:  # the database is away: the exchanges fail on it too, or go on once it is back
            log.warning("import %s: heartbeat failed: %s", self.import_id, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            state = "running"
        if state == "taken":
            return "taken"
        if state != "running":
            return "cancelled"
        if stop_when is not None and await stop_when():
            return "the client left before the import ended"
        return None

    async def _row_state(self) -> str | None:
        try:
            return await asyncio.wait_for(chat_imports.beat(self.pool, self.import_id, self.worker), BOOKKEEPING_SECONDS)
        except Exception:  # the database is away: as before, the row counts as gone
            return None

    def _taken(self) -> ImportStopped:
        return ImportStopped(
            f"Another import of this conversation took chat {self.thread_id} over (this one had been silent past "
            f"{chat_imports.STALE_AFTER_SECONDS} s); the chat keeps what was imported, and the other import goes on with it.",
            chat_id=self.thread_id, imported=self.result.messages,
        )

    async def _cancelled_meanwhile(self) -> bool:
        try:
            return await asyncio.wait_for(chat_imports.beat(self.pool, self.import_id, self.worker), BOOKKEEPING_SECONDS) != "running"
        except Exception:
            return False

    async def _exchanges(self) -> None:
        cfg = {"configurable": {"thread_id": self.thread_id}}
        if self.head is None:
            await write_empty_chat(self.graph, self.thread_id)
            await self._progress(0)
        index = sum(len(g) for g in self.groups[: self.start])
        user_turns = sum(any(m.role == "user" for m in g) for g in self.groups[: self.start])
        for number, group in enumerate(self.groups[self.start :], start=self.start + 1):
            if number > self.start + 1 and await chat_imports.beat(self.pool, self.import_id, self.worker) != "running":
                raise _Revoked()  # taken over or cancelled since the last exchange: not one more on the chat
            messages = [_message(m, message_id(self.thread_id, index + k)) for k, m in enumerate(group)]
            for k, source in enumerate(group):
                if source.source_id:  # a source id given twice names its first message, as below for earlier runs
                    self.result.id_map.setdefault(source.source_id, messages[k].id)
            index += len(group)
            user_turns += any(m.role == "user" for m in group)
            # As load_context would count the turn, and reply answer it; then the graph goes on
            # to the memory phase, every step after reply.
            await self.graph.aupdate_state(cfg, {"messages": messages, "user_turns": user_turns}, as_node="reply")
            await self.graph.ainvoke(None, cfg, context=self.ctx)
            await self._progress(number, imported=index)
            if self.on_progress is not None:
                maybe = self.on_progress(self.result.messages, len(self.chat.messages))
                if maybe is not None:
                    await maybe
        # The id map covers the exchanges of earlier runs too (they come first: their message wins a shared source id).
        earlier = {}
        for position, m in enumerate(self.chat.messages[: sum(len(g) for g in self.groups[: self.start])]):
            if m.source_id:
                earlier.setdefault(m.source_id, message_id(self.thread_id, position))
        self.result.id_map = {**self.result.id_map, **earlier}

    async def _progress(self, exchanges_done: int, imported: int = 0) -> None:
        """The row records the exchange and the importer takes it as its head, both or neither: a stop
        that cancelled the exchanges between the two rolled the thread back past what the row counted,
        and a resume then skipped an exchange. A cancel arriving meanwhile waits for the write (one
        short statement, within BOOKKEEPING_SECONDS) and is raised after it."""
        write = asyncio.ensure_future(self._record_progress(exchanges_done, imported))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            try:
                await asyncio.wait_for(write, BOOKKEEPING_SECONDS)
            except Exception:  # the database is away: the row's heartbeat stops and it reads as incomplete
                pass
            raise

    async def _record_progress(self, exchanges_done: int, imported: int) -> None:
        mark = await mark_thread(self.pool, self.thread_id)
        ok = await chat_imports.record_progress(
            self.pool, self.import_id, self.worker, imported=imported, exchanges=exchanges_done,
            head=mark.checkpoint_id, head_writes=mark.head_writes,
        )
        if not ok:
            raise _Revoked()
        self.head = mark
        self.result.messages = imported
        self.record_at_head = await get_chat(self.graph.store, self.user_id, self.thread_id)

    # ------------------------------------------------------------------ ending early
    async def _halt(self, work: asyncio.Task, head: str | None) -> None:
        """Cancel the exchanges and fence the thread: late writes of this process newer than ``head`` are dropped."""
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        close = getattr(self.graph.checkpointer, "close_thread", None)
        if close is not None:
            await close(self.thread_id, head)

    async def _undo(self, work: asyncio.Task) -> None:
        """Cancelled: remove everything of the chat (the fence stays closed until it expires: the chat is gone).
        A clean-up: not refused when the user was forgotten meanwhile (storage.owner_forgets)."""
        with owner_forgets.no_caller():
            await self._halt(work, None)
            parts = SimpleNamespace(checkpointer=self.graph.checkpointer, store=self.graph.store, pool=self.pool)
            # What its exchanges taught goes with it ("nothing of it is kept"; it stayed). An extension's are
            # its new messages': what the chat taught before stays, as a plain deletion of the chat keeps it.
            ids = {message_id(self.thread_id, i) for i in range(self.result.held_before, len(self.chat.messages))} if self.extends_chat else None
            await delete_taught_only_by_chat(self.graph.store, self.user_id, self.thread_id, message_ids=ids)
            await delete_chat(parts, self.user_id, self.thread_id)
            await chat_imports.delete(self.pool, self.user_id, self.thread_id)

    async def _let_go(self, work: asyncio.Task) -> None:
        """Another import took this one over: its exchanges stop, and the thread is left to the other.
        No fence: nothing is taken back, and one would drop the other's writes if it runs in this process."""
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)

    async def _stop(self, work: asyncio.Task, detail: str) -> bool:
        """Stopped: keep the complete exchanges, take the one under way back, mark the import incomplete;
        an extension's row goes instead (its chat was complete: it takes messages again, and the next
        import of the conversation extends it from there). Taken over meanwhile: nothing is taken back
        (False: the other import has the chat)."""
        if await self._row_state() == "taken":
            await self._let_go(work)
            return False
        head = self.head.checkpoint_id if self.head is not None else None
        try:
            await self._halt(work, head)
            removed = await rollback_thread(self.pool, self.head or ThreadMark(self.thread_id, None))
            reopen = getattr(self.graph.checkpointer, "reopen_thread", None)
            if reopen is not None:
                reopen(self.thread_id, head, removed)
            await self._in_step_with_thread()
        finally:
            if self.extends_chat:
                await self._end_extension()
            else:
                await self._mark_incomplete(detail)
        return True

    async def _end_extension(self) -> None:
        try:
            await asyncio.wait_for(chat_imports.finish(self.pool, self.import_id, self.worker), BOOKKEEPING_SECONDS)
        except Exception as exc:  # its heartbeat stops: the next import of it takes the chat back (take_back_extension)
            log.warning("import %s: its row stays until the next import: %s", self.import_id, exc)

    async def _in_step_with_thread(self) -> None:
        """The exchange taken back had been indexed and recorded by the chat's record (index_messages and
        record_chat run before extract_memories): both are brought back to what the chat holds, or a
        search finds messages the chat no longer shows, and the chat keeps their title and time, until
        a resume, which may never come. Bounded: a deletion or a resume waits for this row's heartbeat."""
        try:
            await asyncio.wait_for(self._back_to_head(), BOOKKEEPING_SECONDS)
        except Exception as exc:  # the database is away: a resume brings both in step (index_thread, record_chat)
            log.warning("import %s: the index and the chat's record keep the exchange taken back: %s", self.import_id, exc)

    async def _back_to_head(self) -> None:
        if await chat_imports.beat(self.pool, self.import_id, self.worker) != "running":
            return  # cancelled meanwhile (a deletion, forget-me): that removes the chat whole
        values = (await self.graph.aget_state({"configurable": {"thread_id": self.thread_id}})).values
        await episodes.index_for_run(self.graph.store, self.user_id, self.thread_id, values.get("messages", []))
        if self.record_at_head is not None:  # as it stood after the last complete exchange (a rename or forget since still wins)
            await save_chat_record(self.graph.store, self.user_id, self.record_at_head.model_copy())
        else:  # a resume stopped before its first exchange ended: at least its text and count
            await rewrite_chat_text(self.graph.store, self.user_id, self.thread_id, values)

    async def _mark_incomplete(self, detail: str) -> None:
        try:
            await asyncio.wait_for(chat_imports.mark_incomplete(self.pool, self.import_id, self.worker, detail), BOOKKEEPING_SECONDS)
        except Exception as exc:  # its heartbeat stops anyway: the row reads as incomplete soon
            log.warning("import %s: could not mark it incomplete: %s", self.import_id, exc)

    def _failure(self, cls: type[ImportFailed], detail: str) -> ImportFailed:
        done, total = self.result.messages, len(self.chat.messages)
        if self.extends_chat:
            return cls(
                f"The import stopped after {done} of {total} messages ({detail}); chat {self.thread_id} holds those, with their "
                "memory updates, and takes messages. Import the same export again to add the rest.",
                chat_id=self.thread_id, imported=done,
            )
        return cls(
            f"The import stopped after {done} of {total} messages ({detail}); chat {self.thread_id} holds those, with their "
            f"memory updates, marked incomplete. Resume it with the same history (`memory-agent import FILE --resume "
            f"{self.thread_id}` or POST /chats/import?resume={self.thread_id}{'; an export: import it again' if self.chat.source_id else ''}), "
            "or delete it.",
            chat_id=self.thread_id,
            imported=done,
        )
