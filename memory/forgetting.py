"""Forgetting one thing everywhere it lives, and finding what "forget that I …" means.

One thing a user said can live in seven places: the message, its row in the index of what was
said, a fact, a profile field or preference, a task, the running summary of its chat, and the
chat's searchable text and title (which related-chat snippets quote). :func:`forget` reaches all
of them (and the rows of the user's ended runs, storage.chat_runs, which keep no text once ended):

1. in one transaction holding the user's lock, it records the forget (storage.forget_ledger:
   hashes of the item's distinctive word stems and its source messages), then deletes every fact
   and task that carries those words or came only from those messages (superseded history
   included), and clears every profile field and preference that carries them;
2. then the derived copies: the index rows of every message that carried them are rewritten
   without them (new text, words and vector), every chat record that carried them is redacted and
   written again, and so is the head state of every chat of the user (STATE_CHANNELS: the running
   summary, what the turn loaded, what it wrote).

What a forget missed cannot come back: the redactor built from the ledger (core.redaction) runs
on every model call, index write and extraction, on the state every turn leaves (summarize and
extract_memories apply it) and on every current state this project shows (:func:`shown_state`;
the LangGraph Server's history of older checkpoints shows them as written, docs/memory-model.md), so neither the rules,
nor a new extraction over the old messages, nor a reindex, nor an import, nor a fork from a
checkpoint older than the forget, nor a turn that loaded its state before it restores it. The
transcript keeps the message as the user wrote it, marked as forgotten (``forgotten_in``), until
the user deletes it outright.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Literal, Sequence

from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel

from core.errors import InvalidMessage
from core.namespaces import facts_ns, tasks_ns
from core.redaction import Redactor, changed, deleted_stems, distinctive_stems, term_hashes
from core.schemas import Fact, SummaryBoard, Task
from core.text_validation import LINE_CHARS, is_blank, unstorable_reason
from core.words import content_words, plain_stem, plain_word
from embeddings.calibration import CALIBRATED
from memory.writer.forgets import ForgetWrite, field_label, forget_items, forget_message_items, value_texts
from core.messages import unsummarized
from memory.chat_text import SearchableText, redact_record, searchable_text
from memory.writer.records import save_chat_record
from memory.user_memory import _all, get_user_document, list_chats, parse_item, search_facts
from storage import chat_runs, checkpoint_rows, episode_rewrites, forget_ledger, thread_owners
from storage.user_transaction import user_transaction
from storage.memory_store import memory_store

log = logging.getLogger(__name__)

Part = Literal["facts", "tasks", "profile", "preferences"]
PARTS: tuple[Part, ...] = ("facts", "tasks", "profile", "preferences")
# A fact found by meaning alone (its words differ from the request's) must be this close.
FORGET_SIMILARITY = CALIBRATED.forget_match
FORGET_CHARS = LINE_CHARS

"""The longest text a forget by words takes (POST /memory/forget, the CLI's /forget, MCP's forget,
the agent's forget_memory tool): it names one thing. Checked here, where they all pass."""


def checked_words(words: str) -> str:
    """``words`` unchanged, or InvalidMessage saying why a forget cannot take them."""
    reason = unstorable_reason(words)
    if reason is not None:
        raise InvalidMessage(f"The text to forget {reason}.")
    if len(words) > FORGET_CHARS:
        raise InvalidMessage(
            f"The text to forget is too long: {len(words):,} characters, the limit is {FORGET_CHARS:,}. "
            'Name one thing to forget at a time ("that I work as a nurse", "Porto").'
        )
    return words


def distinctive_words(text: str) -> list[str]:
    """The content words of ``text`` whose stems a forget of it hides. (The stems are found once:
    found again for each word, the cost grew with the square of the text's length.)"""
    stems = distinctive_stems(text)
    return [plain_word(w) for w in content_words(text) if plain_stem(w) in stems]


class ForgetTarget(BaseModel):
    """One item to forget: a fact or task by id, or a profile field or preference by name."""

    part: Part
    key: str


@dataclass
class ForgetReport(ForgetWrite):
    """What a forget reached, copy by copy: the store's items (what the writer's half did), then the
    derived copies this module rewrites."""

    messages: int = 0
    summaries: int = 0
    chats: int = 0

    @classmethod
    def of(cls, written: ForgetWrite) -> "ForgetReport":
        return cls(**{f.name: getattr(written, f.name) for f in fields(ForgetWrite)})

    def describe(self) -> str:
        reached = [f"{n} {what}" for n, what in ((self.facts, "fact(s)"), (self.tasks, "task(s)"), (self.messages, "message(s)"),
                                                 (self.summaries, "summary(ies)"), (self.chats, "chat record(s)")) if n]
        if self.fields:
            reached.append("field(s) " + ", ".join(self.fields))
        return f"Forgot: {'; '.join(self.forgotten) or 'nothing'}" + (f" (removed from {', '.join(reached)})" if reached else "")


async def forget(store, user_id: str, targets: list[ForgetTarget], *, words: str = "", now: datetime | None = None) -> ForgetReport | None:
    """Forget ``targets`` (and, with ``words``, whatever carries the words' distinctive stems) in every
    copy. None when there is nothing to forget (no such item, and no words)."""
    checked_words(words)
    written = await forget_items(store, user_id, [(t.part, t.key) for t in targets], words=words, now=now)
    if written is None:
        return None
    report = ForgetReport.of(written)
    report.messages = await _redact_index(store, user_id, written.redactor, written.texts, written.refs)
    report.chats, report.summaries = await _redact_chats(store, user_id, written.redactor)
    await chat_runs.clear_text(memory_store(store).pool, user_id)  # ended runs' rows: which of them carried it is not known
    # Counts only: a log that named what was forgotten would be a copy of it no forget reaches.
    log.info("forget for %s: %d fact(s), %d task(s), %d field(s), %d message(s), %d summary(ies), %d chat record(s)",
             user_id, report.facts, report.tasks, len(report.fields), report.messages, report.summaries, report.chats)
    return report


async def forget_message(store, user_id: str, thread_id: str, message_id: str, text: str = "") -> ForgetReport:
    """Hide one message whole, for good: recorded in the ledger, the facts and tasks only it taught
    deleted, its row in the index of what was said emptied, and the chat's ended runs' rows rid of
    what the user said. With ``text`` (the user's message as written), its distinctive words are
    hidden in the agent's replies in every chat (core.redaction: ``reply_hashes``), where one may
    have quoted it, and the index rows of the replies that carried them are rewritten; the user's
    own other messages keep them (they are statements of their own)."""
    written = await forget_message_items(store, user_id, thread_id, message_id, text)
    report = ForgetReport.of(written)
    stems = [(t, deleted_stems(t)) for t in written.texts]  # once per text: per word, a long message cost seconds
    words = [plain_word(w) for t, found in stems for w in content_words(t) if plain_stem(w) in found]
    report.messages = await _redact_index(store, user_id, written.redactor, [], written.refs, words=words)
    await chat_runs.clear_text(memory_store(store).pool, user_id, thread_id)
    return report


async def _redact_index(
    store, user_id: str, redactor: Redactor, texts: list[str], refs: list[tuple[str, str]], *, words: Sequence[str] = ()
) -> int:
    """Rewrite the index rows of the messages that carried what was forgotten (the distinctive words
    of ``texts``, or ``words``) or are one of ``refs``."""
    ours = memory_store(store)
    words = sorted({w for t in texts for w in distinctive_words(t)} | set(words))
    rewritten = 0
    async for rows in episode_rewrites.pages_with_words(ours.pool, user_id, words, refs):
        # Up to 2,000 rows of up to 20,000 characters a page: redacted off the event loop, which serves other users' replies.
        changed = await asyncio.to_thread(_redacted_rows, rows, redactor)
        if not changed:
            continue
        vectors = await ours.embeddings.aembed_documents([t for _, t in changed])
        rewritten += await episode_rewrites.rewrite(
            ours.pool, user_id, [episode_rewrites.Rewrite(r.thread_id, r.message_id, t, v) for (r, t), v in zip(changed, vectors)]
        )
    return rewritten


def _redacted_rows(rows: list, redactor: Redactor) -> list[tuple]:
    """The rows ``redactor`` changes, each with its new text."""
    out = [(r, redactor.said(r.thread_id, r.message_id, r.content, reply=r.role != "user")) for r in rows]
    return [(r, text) for r, text in out if text != r.content]


def redact_board(board: SummaryBoard, redactor: Redactor) -> SummaryBoard:
    """The summary board without what was forgotten: its text redacted, list entries that carried it dropped."""
    lists = {name: [i for i in getattr(board, name) if not redactor.carries(i)] for name in ("key_facts", "entities", "topics", "action_items", "pending_questions")}
    return board.model_copy(update={"summary": redactor.text(board.summary), **lists})


async def _redact_chats(store, user_id: str, redactor: Redactor) -> tuple[int, int]:
    """Chat records (title, searchable text) and the state of every chat of the user that carried
    what was forgotten; how many records and running summaries were written again."""
    summaries = 0
    for thread_id in await thread_owners.threads_of(memory_store(store).pool, user_id):
        summaries += "summary" in await redact_head(store, thread_id, redactor)
    chats = 0
    for chat in await list_chats(store, user_id):
        if not (redactor.carries(chat.summary_text) or redactor.carries(chat.title)):
            continue
        redact_record(chat, redactor)
        await save_chat_record(store, user_id, chat)
        chats += 1
    return chats, summaries


# --------------------------------------------------------------------------- the chat's state
STATE_CHANNELS = ("summary", "loaded_context", "memory_written")
"""The channels of a chat's state drawn from memory, not the transcript: the running summary board,
what load_context loaded for the turn, what extraction wrote. Studio and the thread's state show
them; they must hold nothing the user had forgotten."""


def redact_state(values: dict, redactor: Redactor, *, board: bool = True) -> dict:
    """The channels of ``values`` (a chat's state) in STATE_CHANNELS that ``redactor`` changes, as it
    leaves them (the summary board only with ``board``)."""
    if not redactor:
        return {}
    out: dict = {}
    if board and values.get("summary"):
        before = SummaryBoard.model_validate(values["summary"])
        after = redact_board(before, redactor)
        if after != before:
            out["summary"] = after.model_dump(mode="json")
    loaded = values.get("loaded_context")
    if loaded:
        kept = redactor.value({**loaded, "excerpts": _excerpts_shown(loaded["excerpts"], redactor)} if "excerpts" in loaded else loaded)
        if changed(loaded, kept):
            out["loaded_context"] = kept
    written = values.get("memory_written")
    if written and changed(written, kept := redactor.value(written)):
        out["memory_written"] = kept
    return out


def _excerpts_shown(excerpts: list, redactor: Redactor) -> list:
    """Excerpts of what was said without the lines of hidden messages (which only their ids name)."""
    out = []
    for e in excerpts or []:
        lines = [line for line in e.get("lines") or [] if not redactor.hides(e.get("thread_id"), line.get("message_id"))]
        if lines:
            out.append({**e, "lines": lines})
    return out


def shown_state(values: dict, redactor: Redactor) -> dict:
    """A chat's state as it may be shown to its user: the channels drawn from memory redacted (the
    transcript stays as written; ``forgotten_in`` marks its messages). Whatever wrote the state, an
    older checkpoint a fork started from included, nothing forgotten is shown."""
    return {**values, **redact_state(values, redactor)}


async def redact_head(store, thread_id: str, redactor: Redactor, *, board: bool = True) -> list[str]:
    """The chat's head state rewritten without what ``redactor`` hides; the channels rewritten."""
    if not redactor:
        return []
    return await checkpoint_rows.rewrite_head(
        memory_store(store).pool, thread_id, STATE_CHANNELS, lambda values: redact_state(values, redactor, board=board)
    )


async def redactor_now(store, user_id: str) -> Redactor:
    """The user's redactor read under the user's lock, as the writer reads it: a forget in progress
    is waited for, so a node that writes the state with it misses no forget committed before."""
    async with user_transaction(store, user_id) as tx:
        return await forget_ledger.redactor_of_store(tx, user_id)


async def state_redaction(store, user_id: str, values: dict) -> dict:
    """What a node adds to its update so that the state it leaves holds nothing the user had
    forgotten (``values``: the STATE_CHANNELS as the node leaves them)."""
    return redact_state(values, await redactor_now(store, user_id))


@dataclass(frozen=True)
class RedactedChat:
    """A chat as the text derived from it may draw on it: its summary board and its messages as
    the user's forgets leave them (the title, the chat's searchable text)."""

    board: SummaryBoard
    messages: list[BaseMessage]

    @property
    def opening(self) -> HumanMessage | None:
        return next((m for m in self.messages if isinstance(m, HumanMessage)), None)

    def searchable(self, title: str, summarized_through: str | None) -> SearchableText:
        return searchable_text(self.board, unsummarized(self.messages, summarized_through), title=title, opening=self.opening)


async def redacted_chat(store, user_id: str, thread_id: str, messages: Sequence[BaseMessage], summary: dict | None) -> RedactedChat:
    """The chat (its ``messages`` and ``summary`` board, from the thread's state) as the user's forgets leave it."""
    redactor = await redactor_for(store, user_id)
    board = SummaryBoard.model_validate(summary) if summary else SummaryBoard()
    return RedactedChat(redact_board(board, redactor) if redactor else board, redactor.messages_of(messages, thread_id))


def was_folded(values: dict, message_id: str | None) -> bool:
    """Whether the thread's summary board (``values``: its state) has folded the message in."""
    ids = [m.id for m in values.get("messages", [])]
    cursor = values.get("summarized_through")
    return message_id in ids and cursor in ids and ids.index(message_id) <= ids.index(cursor)


async def redact_deleted_message(store, user_id: str, thread_id: str, values: dict, message: BaseMessage) -> None:
    """A message deleted outright (``values``: its chat's state): the state of the user's chats
    loses what it drew from it. Facts, snippets and the summary paraphrase it, so its distinctive
    words are all there is to go by: what load_context and extraction left in each chat's head loses
    the clauses that share one, and so does its own chat's summary board if the board had folded it
    in (another chat's board never saw it). Excerpts lose its lines, by id."""
    redactor = Redactor(user_id, frozenset(term_hashes(user_id, [message.text])), frozenset({(thread_id, message.id)}))
    for thread in await thread_owners.threads_of(memory_store(store).pool, user_id):
        await redact_head(store, thread, redactor, board=thread == thread_id and was_folded(values, message.id))


# --------------------------------------------------------------------------- "forget that I …"
@dataclass
class Candidate:
    target: ForgetTarget
    label: str


async def find_targets(store, user_id: str, request: str) -> list[Candidate]:
    """What a request such as "forget that I work as a nurse" or "/forget Porto" names: every fact,
    task, profile field and preference that carries its distinctive words; failing that, the fact
    nearest in meaning when it is close."""
    wanted = distinctive_stems(checked_words(request))
    probe = Redactor(user_id, frozenset(term_hashes(user_id, [request])))
    found: list[Candidate] = []
    doc = await get_user_document(store, user_id)
    for part in ("profile", "preferences"):
        section = getattr(doc, part)
        for name in type(section).model_fields:
            value = getattr(section, name)
            if any(probe.carries(t) for t in value_texts(part, name, value)):
                found.append(Candidate(ForgetTarget(part=part, key=name), field_label(part, name, value)))
    for part, ns in (("facts", facts_ns(user_id)), ("tasks", tasks_ns(user_id))):
        for item in await _all(store, ns):
            parsed = parse_item(part, item)
            if parsed is None or (isinstance(parsed, Fact) and parsed.status != "active") or (isinstance(parsed, Task) and parsed.status == "retracted"):
                continue
            text = parsed.text if isinstance(parsed, Fact) else parsed.description
            if wanted and probe.carries(text):
                found.append(Candidate(ForgetTarget(part=part, key=parsed.id), text))
    if not found and request.strip():
        hits = await search_facts(store, user_id, request, limit=1)
        if hits and hits[0][1] >= FORGET_SIMILARITY:
            found.append(Candidate(ForgetTarget(part="facts", key=hits[0][0].id), hits[0][0].text))
    return found


async def forget_request(store, user_id: str, request: str) -> ForgetReport | None:
    """Forget what ``request`` names (:func:`find_targets`) and its words; None when it names nothing.
    InvalidMessage when ``request`` is blank (is_blank: it names nothing), over FORGET_CHARS or cannot be stored."""
    checked_words(request)
    if is_blank(request):
        raise InvalidMessage('The text to forget is empty; say what to forget ("that I work as a nurse", "Porto").')
    found = await find_targets(store, user_id, request)
    if not found and not await _said_anywhere(store, user_id, request):
        return None
    return await forget(store, user_id, [c.target for c in found], words=request)


async def _said_anywhere(store, user_id: str, request: str) -> bool:
    """Whether some message of the user carries the request's distinctive words (a thing said, never
    remembered as an item): in the index of what was said, or in a turn being answered now, whose
    memory update is still to come (it then learns nothing of it)."""
    words = distinctive_words(request)
    if not words:
        return False
    probe = Redactor(user_id, frozenset(term_hashes(user_id, [request])))
    pool = memory_store(store).pool
    if any(probe.carries(text) for text in await chat_runs.active_turn_texts(pool, user_id)):
        return True
    async for rows in episode_rewrites.pages_with_words(pool, user_id, words, page=500):
        # Off the event loop, which serves other users' replies; a page is a superset the probe narrows.
        # Every candidate is read: stopping early could answer "nothing matches" for a word said.
        if await asyncio.to_thread(lambda: any(probe.carries(r.content) for r in rows)):
            return True
    return False


class Forgotten(BaseModel):
    """What a forget reached (MCP's ``forget``); it names no forgotten word."""

    forgotten: bool
    facts: int = 0
    tasks: int = 0
    fields: int = 0
    messages: int = 0
    summaries: int = 0
    chats: int = 0


async def forget_in_words(store, user_id: str, request: str) -> Forgotten:
    report = await forget_request(store, user_id, request)
    if report is None:
        return Forgotten(forgotten=False)
    return Forgotten(forgotten=True, facts=report.facts, tasks=report.tasks, fields=len(report.fields), messages=report.messages,
                     summaries=report.summaries, chats=report.chats)


async def forgotten_in(store, user_id: str, thread_id: str, messages) -> set[str]:
    """Ids of the chat's messages that carry something forgotten (the transcript marks them)."""
    redactor = await forget_ledger.redactor(memory_store(store).pool, user_id)
    if not redactor:
        return set()
    return {m.id for m in messages if m.id and (redactor.hides(thread_id, m.id) or redactor.carries(m.text, reply=not isinstance(m, HumanMessage)))}


async def redactor_for(store, user_id: str) -> Redactor:
    """The user's redactor, for everything that sends text to a model or writes derived text."""
    return await forget_ledger.redactor(memory_store(store).pool, user_id)
