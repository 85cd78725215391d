"""Chat routes: every chat is a LangGraph thread (thread_id = chat id) owned by one user.

Turns run the compiled graph with ``Context(user_id=<caller>, persona=<chat persona>)``
through :mod:`app.runs.turn_runner`; replies stream as Server-Sent Events (:mod:`app.http.sse`).

- One reply at a time per chat (409 ``reply_in_progress``), enforced in Postgres so it
  holds across workers: one writer per thread keeps the checkpoint chain linear.
- A chat waiting for a task-change confirmation takes no new message and deletes none (409
  ``confirmation_pending``) until ``/resume`` answers it: an unanswered tool call would be left
  in the history (a deletion's rewrite dropped the question, answered by nobody).
- ``/stop`` ends the running reply and keeps it as far as it got, marked ``stopped``;
  memory learns nothing from a stopped turn (see app.runs.turn_runner for the rule).
- Editing a user message forks the thread at the checkpoint before that message and
  answers the edited text there; the later messages leave the thread's current
  branch (and the model's view). Memories learned from them stay in the user's
  memory, where they can be corrected through /memory. Regenerating a reply is the
  same fork, answering that reply's user message again.
- ``POST /chats/import`` lives in app.http.routes_imports (ChatGPT and Claude exports too). A chat being imported takes no
  message (409 ``import_in_progress``); deleting it stops the import, and nothing of it stays.
- ``PATCH /chats/{id}`` renames a chat; a title the user set is never replaced by a
  generated one (memory.chat_titles).
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from typing import Annotated, AsyncIterator

from fastapi import APIRouter, Body, Depends, Query
from pydantic import AfterValidator
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.types import Command, StateSnapshot

import prompts
from app.http.auth import current_user, owned_chat
from app.http.errors import ApiError, not_found
from app.http.schemas import (
    ChatCreate,
    ChatDetail,
    ChatList,
    ChatPatch,
    ChatSearchResult,
    ChatSummary,
    Deleted,
    ErrorResponse,
    ImportProgress,
    MessageIn,
    MessageOut,
    ModelView,
    PendingInterrupt,
    ResumeIn,
    SearchHit,
    StopResult,
    ToolCallOut,
)
from app.http.services import Services, get_services
from app.http.sse import EVENTS_DOC, sse_response
from nodes.compaction import model_view
from core.text_validation import Identifier, is_blank, storable, validate_user_text
from app.runs.turn_runner import STOPPED_DISCARDED, STOPPED_KEPT, TurnSpec
from storage import chat_imports, chat_runs, checkpoint_rows, owner_forgets, thread_owners
from memory.chat_admin import delete_chat, delete_message_everywhere, stop_imports, write_empty_chat
from memory.writer.records import rename_chat as rename_chat_record
from core.errors import InvalidMessage
from core.schemas import NEW_CHAT_TITLE, ChatRecord, SummaryBoard
from memory.writer.records import create_chat_record
from memory.queries import CHAT_SEARCH_FORMULA, RankedChat, find_chat, forgotten_in, import_states, list_chats, owned_chats, redactor_for, shown_state
from core.messages import is_stopped, sent_at, stamp_sent_at

router = APIRouter(tags=["chats"])

# What most routes take: the caller, their chat (404/403 otherwise) and the worker's services.
OwnedChat = Annotated[ChatRecord, Depends(owned_chat)]
CurrentUser = Annotated[str, Depends(current_user)]
AppServices = Annotated[Services, Depends(get_services)]

SNIPPET_CHARS = 200
STOP_WAIT_SECONDS = 15.0

_ERRORS = {code: {"model": ErrorResponse} for code in (401, 403, 404)}
_TURN_ERRORS = {**_ERRORS, 409: {"model": ErrorResponse}, 413: {"model": ErrorResponse}, 422: {"model": ErrorResponse}}


# --------------------------------------------------------------------------- helpers
def chat_summary(chat: ChatRecord, imported: chat_imports.ImportRow | None = None) -> ChatSummary:
    progress = None
    if imported is not None:
        progress = ImportProgress(state=imported.state, imported=imported.imported, total=imported.total, detail=imported.detail)
    return ChatSummary(
        import_state=progress,
        id=chat.thread_id,
        title=chat.title,
        title_set_by_user=chat.title_by_user,
        persona=chat.persona or "assistant",
        summary_snippet=chat.summary_text[:SNIPPET_CHARS],
        message_count=chat.message_count,
        created_at=chat.created_at,
        last_activity=chat.last_activity,
    )


def config_of(chat_id: str) -> dict:
    return {"configurable": {"thread_id": chat_id}}


def checked_text(text: str, max_chars: int) -> str:
    """413 for an oversized message, 422 for any other refusal (empty, NUL…)."""
    if isinstance(text, str) and len(text) > max_chars:
        raise ApiError(
            413,
            "message_too_long",
            f"The message is too long: {len(text):,} characters, the limit is {max_chars:,}. "
            "Split it, or ingest it as a document with `memory-agent ingest`.",
        )
    try:
        return validate_user_text(text, max_chars)
    except InvalidMessage as exc:
        raise ApiError(422, "invalid_message", str(exc)) from exc


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, SystemMessage):
        return "system"
    return "assistant"


def message_out(message: BaseMessage, visible: set[str], forgotten: set[str] = frozenset()) -> MessageOut:
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return MessageOut(
        id=message.id or "",
        role=_role(message),
        content=message.text,
        tool_calls=[ToolCallOut(id=c.get("id"), name=c["name"], args=c.get("args") or {}) for c in calls],
        tool_name=message.name if isinstance(message, ToolMessage) else None,
        in_model_view=message.id in visible,
        sent_at=sent_at(message),
        stopped=is_stopped(message),
        forgotten=message.id in forgotten,
    )


async def chat_detail(services: Services, chat: ChatRecord, user: str | None = None, *, limit: int | None = None, before: str | None = None) -> ChatDetail:
    """The chat as ``GET /chats/{id}`` shows it; with ``limit``, only that many messages, the newest
    (or those just before message ``before``): a long chat's page is not its whole history."""
    # A dead worker's run is taken back first, as a claim would: the chat then shows its turn kept
    # as a stopped one, and never says "a reply is being written" for a reply nobody writes.
    active = await chat_runs.active_run(services.backend.pool, chat.thread_id)
    if active is not None and active.stale:
        await services.runs.reap(chat.thread_id)
        active = await chat_runs.active_run(services.backend.pool, chat.thread_id)
    state = await services.graph.aget_state(config_of(chat.thread_id))
    values = state.values or {}
    if user:  # the summary board as the user's forgets leave it, whatever path wrote the state
        values = shown_state(values, await redactor_for(services.backend.store, user))
    messages = list(values.get("messages", []))
    cursor = values.get("summarized_through")
    view = model_view(messages, cursor)
    board = SummaryBoard.model_validate(values.get("summary") or {})
    # (The caller owns the chat: owned_chat checked it.)
    imported = (await import_states(services.backend.pool, None, [chat.thread_id])).get(chat.thread_id)
    end = len(messages)
    if before is not None:
        end = next((i for i, m in enumerate(messages) if m.id == before), -1)
        if end < 0:
            raise not_found(f"Message {before}")
    start = max(0, end - limit) if limit is not None else 0
    shown = messages[start:end]
    forgotten = await forgotten_in(services.backend.store, user, chat.thread_id, shown) if user else set()
    return ChatDetail(
        chat=chat_summary(chat, imported),
        messages=[message_out(m, {v.id for v in view}, forgotten) for m in shown],
        messages_total=len(messages),
        has_earlier=start > 0,
        summary=board,
        model_view=ModelView(
            summary=board.render(),
            summarized_through=cursor,
            summary_folds=values.get("summary_folds", 0),
            message_ids=[m.id for m in view],
        ),
        pending_interrupts=[PendingInterrupt(id=i.id, value=i.value) for i in (state.interrupts or ())],
        running=active is not None and not active.stale,
    )


async def claim_run_slot(services: Services, chat_id: str, user: str, kind: str) -> str:
    try:
        return await services.runs.claim_run_slot(chat_id, user, kind)
    except chat_imports.ImportInProgress as exc:
        raise ApiError(409, "import_in_progress", str(exc)) from exc
    except chat_runs.RunInProgress as exc:
        raise ApiError(
            409,
            "reply_in_progress",
            f"A reply is still running on this chat ({exc.run.kind}, {exc.run.status}). Wait for it, or POST "
            f"/chats/{chat_id}/stop. One writer per chat keeps its history linear.",
        ) from exc


async def release(services: Services, run_id: str) -> None:
    await chat_runs.finish(services.backend.pool, run_id, "released")


@asynccontextmanager
async def holding_run_slot(services: Services, chat_id: str, user: str, kind: str) -> AsyncIterator[str]:
    """Claim the chat for a run; released again if anything fails before the run is launched (the
    run releases it when it ends). Work done without a run holds the chat with :func:`holding_chat`."""
    run_id = await claim_run_slot(services, chat_id, user, kind)
    try:
        yield run_id
    except BaseException:
        await asyncio.shield(release(services, run_id))
        raise


@asynccontextmanager
async def holding_chat(services: Services, chat_id: str, user: str, kind: str) -> AsyncIterator[str]:
    """Claim the chat for work done within the request, no run launched (a deletion): released
    when the work ends, whatever happens."""
    async with services.runs.hold(await claim_run_slot(services, chat_id, user, kind)) as run_id:
        yield run_id


def turn_spec(
    chat: ChatRecord, user: str, kind: str, graph_input, *, user_text: str = "", fork_from: dict | None = None, head: StateSnapshot | None = None
) -> TurnSpec:
    return TurnSpec(
        thread_id=chat.thread_id,
        user_id=user,
        persona=chat.persona or "assistant",
        kind=kind,
        graph_input=graph_input,
        fork_from=fork_from,
        user_text=user_text,
        head=head,
    )


def new_user_message(text: str) -> dict:
    # Dated when received: a turn stopped before load_context ran (which dates an undated message)
    # is written back with the time it was sent, not without one.
    return {"messages": [stamp_sent_at(HumanMessage(text, id=str(uuid.uuid4())))]}


def hit(r: RankedChat) -> SearchHit:
    return SearchHit(chat=chat_summary(r.chat), similarity=r.similarity, recency=r.recency, score=r.score)


# --------------------------------------------------------------------------- list, create, search
@router.get("/chats", response_model=ChatList, responses=_ERRORS)
async def list_user_chats(
    user: CurrentUser,
    services: AppServices,
    limit: Annotated[int | None, Query(ge=1, le=1_000, description="Only this many chats (all when left out).")] = None,
    offset: Annotated[int, Query(ge=0, description="Skip this many of the most recently active first.")] = 0,
):
    """The caller's chats, most recently active first (a page of them with ``limit`` and ``offset``)."""
    chats = await owned_chats(services.backend.pool, user, await list_chats(services.backend.store, user))
    page = chats[offset : None if limit is None else offset + limit]
    imports = await import_states(services.backend.pool, user, (c.thread_id for c in page))
    return ChatList(chats=[chat_summary(c, imports.get(c.thread_id)) for c in page], total=len(chats))


@router.post("/chats", status_code=201, response_model=ChatDetail, responses=_TURN_ERRORS)
async def create_chat(user: CurrentUser, services: AppServices, body: Annotated[ChatCreate | None, Body()] = None):
    """Create a chat. Each of ``messages`` is answered as a full turn (not streamed) before this returns.
    No body at all is a new chat of the defaults, as ``{}`` is (every field is optional)."""
    body = body or ChatCreate()
    if body.persona not in prompts.personas():
        raise ApiError(422, "invalid_request", f"Unknown persona {body.persona!r}; choose one of: {', '.join(prompts.personas())}.")
    texts = [checked_text(t, services.max_message_chars) for t in body.messages]
    title = "" if body.title is None or is_blank(body.title) else body.title.strip()
    chat = ChatRecord(thread_id=str(uuid.uuid4()), title=title or NEW_CHAT_TITLE, title_by_user=bool(title), persona=body.persona)
    await thread_owners.create(services.backend.pool, chat.thread_id, user)
    await create_chat_record(services.backend.store, user, chat)
    await write_empty_chat(services.graph, chat.thread_id)  # (before its first message: that turn then saves once)
    for text in texts:
        async with holding_run_slot(services, chat.thread_id, user, "create") as run_id:
            handle = services.runs.launch(run_id, turn_spec(chat, user, "create", new_user_message(text), user_text=text))
        events = await handle.collect()
        if not events or events[-1][0] != "done":
            break  # a confirmation is pending, or the turn failed: the history shows how far it got
    async with services.backend.pool.connection() as conn:
        # Forget-me ran while the turns did (their runs were stopped, the chat deleted): 410, not a chat that is gone.
        await owner_forgets.refuse_if_forgotten(conn, user, owner_forgets.known_generation(user))
    record = await owned_chat(chat.thread_id, user, services)
    return await chat_detail(services, record, user)


@router.get("/chats/search", response_model=ChatSearchResult, responses=_ERRORS)
async def search_user_chats(
    q: Annotated[str, Query(min_length=1, max_length=500, description="What the chat was about."), AfterValidator(storable)],
    user: CurrentUser,
    services: AppServices,
):
    """Find a chat by topic: one clear match, or several scored candidates to choose from."""
    if is_blank(q):  # spaces, or only invisible characters (docs/api.md, "Blank values")
        raise ApiError(422, "invalid_request", "The search query is empty.")
    found = await find_chat(services.backend.store, user, q)
    return ChatSearchResult(
        query=q,
        outcome=found.outcome,
        match=hit(found.match) if found.match else None,
        candidates=[hit(c) for c in found.candidates],
        formula=CHAT_SEARCH_FORMULA,
    )


# --------------------------------------------------------------------------- one chat
@router.get("/chats/{chat_id}", response_model=ChatDetail, responses=_ERRORS)
async def get_chat_detail(
    chat: OwnedChat,
    user: CurrentUser,
    services: AppServices,
    limit: Annotated[int | None, Query(ge=1, le=5_000, description="Only this many messages, the newest (or those before `before`).")] = None,
    before: Annotated[Identifier | None, Query(description="The id of a message: those before it (404 when the chat has none with it).")] = None,
):
    """Full history for the UI (or a page of it), the summary board, and the compacted view the model
    sees; a message carrying something the user had forgotten is marked ``forgotten``."""
    return await chat_detail(services, chat, user, limit=limit, before=before)


def _confirmation_pending(chat_id: str) -> ApiError:
    return ApiError(
        409,
        "confirmation_pending",
        f"The agent is waiting for a confirmation on this chat; answer it with POST /chats/{chat_id}/resume first.",
    )


@router.delete("/chats/{chat_id}/messages/{message_id}", response_model=Deleted, responses={**_ERRORS, 409: {"model": ErrorResponse}})
async def delete_message_outright(message_id: Identifier, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Delete one message outright: its text leaves the transcript (a "[deleted]" stands in its
    place), every earlier checkpoint of the chat (the chat's undo history goes with it), the index
    of what was said and every model's view, for good."""
    async with holding_chat(services, chat.thread_id, user, "delete"):  # refuses while a reply runs
        state = await services.graph.aget_state(config_of(chat.thread_id))
        if state.interrupts:  # the deletion's rewrite of the thread dropped the question, answered by nobody
            raise _confirmation_pending(chat.thread_id)
        message = next((m for m in (state.values or {}).get("messages", []) if m.id == message_id), None)
        if message is None:
            raise not_found(f"Message {message_id}")
        deleted = await delete_message_everywhere(services.backend, services.graph, user, chat.thread_id, message)
    return Deleted(deleted={"messages": int(deleted)})


@router.delete("/chats/{chat_id}", response_model=Deleted, responses={**_ERRORS, 409: {"model": ErrorResponse}})
async def delete_user_chat(
    chat: OwnedChat, user: CurrentUser, services: AppServices
):
    """Delete the chat: its checkpoints (all tables), its record and its run rows. An import into it
    stops first and undoes itself (deletion wins over an import)."""
    for attempt in (1, 2, 3):
        await stop_imports(services.backend.pool, user, chat.thread_id)
        try:
            async with holding_chat(services, chat.thread_id, user, "delete"):  # refuses while a reply runs
                await delete_chat(services.backend, user, chat.thread_id)  # its run rows go too
            break
        except ApiError as exc:  # an import began on the chat in between (a resume, a grown conversation's): stopped too
            if exc.code != "import_in_progress" or attempt == 3:
                raise
    return Deleted(deleted={"chats": 1})


@router.patch("/chats/{chat_id}", response_model=ChatSummary, responses={**_ERRORS, 422: {"model": ErrorResponse}})
async def rename_chat(body: ChatPatch, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Rename the chat. The title is kept: no generated title replaces it (``title: null`` hands titling back)."""
    title = body.title.strip() if body.title is not None else None
    if title is not None and is_blank(title):
        raise ApiError(422, "invalid_request", "The title is empty; send a title, or null to let the agent title the chat.")
    # Under the user's write lock, like record_chat's write of the same record: a rename is never lost.
    record = await rename_chat_record(services.backend.store, user, chat, title)
    return chat_summary(record)


@router.post("/chats/{chat_id}/messages", responses={200: EVENTS_DOC, **_TURN_ERRORS})
async def send_message(body: MessageIn, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Send a message; the reply streams back as Server-Sent Events."""
    text = checked_text(body.text, services.max_message_chars)
    async with holding_run_slot(services, chat.thread_id, user, "message") as run_id:
        state = await services.graph.aget_state(config_of(chat.thread_id))
        if state.interrupts:
            raise _confirmation_pending(chat.thread_id)
        handle = services.runs.launch(run_id, turn_spec(chat, user, "message", new_user_message(text), user_text=text, head=state))
    return await sse_response(handle)


@router.post("/chats/{chat_id}/resume", responses={200: EVENTS_DOC, **_ERRORS, 409: {"model": ErrorResponse}})
async def resume_chat(body: ResumeIn, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Answer a pending confirmation (``Command(resume={"approved": …})``); streams like /messages."""
    async with holding_run_slot(services, chat.thread_id, user, "resume") as run_id:
        state = await services.graph.aget_state(config_of(chat.thread_id))
        pending = list(state.interrupts or ())
        answer = {"approved": body.approved}
        if not pending:
            raise ApiError(409, "no_pending_confirmation", "Nothing on this chat is waiting for a confirmation.")
        if body.interrupt_id is not None:
            if body.interrupt_id not in {i.id for i in pending}:
                raise ApiError(404, "not_found", f"No pending confirmation with id {body.interrupt_id}.")
            command = Command(resume={body.interrupt_id: answer})
        elif len(pending) == 1:
            command = Command(resume=answer)
        else:  # several changes proposed at once: the same answer for all
            command = Command(resume={i.id: answer for i in pending})
        handle = services.runs.launch(run_id, turn_spec(chat, user, "resume", command))
    return await sse_response(handle)


@router.post("/chats/{chat_id}/stop", response_model=StopResult, responses=_ERRORS)
async def stop_reply(chat: OwnedChat, services: AppServices):
    """Stop the reply being generated (from any worker); returns once the reply so far is saved, marked stopped.

    Memory learns nothing from a stopped turn. (A stopped answer to a confirmation is taken back whole:
    the confirmation is asked again, and a task change it had applied is undone.)"""
    pool = services.backend.pool
    run = await chat_runs.request_stop(pool, chat.thread_id)
    if run is None:
        active = await chat_runs.active_run(pool, chat.thread_id)
        if active is not None and active.status == "committing":
            return StopResult(stopped=False, status="finished", run_id=active.run_id, message="The reply had already finished; memory is being updated.")
        return StopResult(stopped=False, status="idle", run_id=active.run_id if active else None, message="No reply is running on this chat.")
    services.runs.stop_local(run.run_id)  # at once when this worker runs it; otherwise its poller sees the row
    # (A dead worker's run is taken back here, as soon as its heartbeat has expired.)
    status = await services.runs.wait_stopped(run, timeout=STOP_WAIT_SECONDS)
    messages = {
        "stopped": STOPPED_DISCARDED if run.kind == "resume" else STOPPED_KEPT,
        "finished": "The reply had already finished.",
    }
    return StopResult(stopped=status == "stopped", status=status, run_id=run.run_id, message=messages.get(status, f"The run is {status}."))


@router.put("/chats/{chat_id}/messages/{message_id}", responses={200: EVENTS_DOC, **_TURN_ERRORS})
async def edit_message(message_id: Identifier, body: MessageIn, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Edit a user message and regenerate from there (a fork of the thread); streams like /messages."""
    text = checked_text(body.text, services.max_message_chars)
    async with holding_run_slot(services, chat.thread_id, user, "edit") as run_id:
        base = await checkpoint_before(services.graph, chat.thread_id, message_id)
        handle = services.runs.launch(run_id, turn_spec(chat, user, "edit", new_user_message(text), user_text=text, fork_from=base))
    return await sse_response(handle)


@router.post("/chats/{chat_id}/messages/{message_id}/regenerate", responses={200: EVENTS_DOC, **_TURN_ERRORS})
async def regenerate_reply(message_id: Identifier, chat: OwnedChat, user: CurrentUser, services: AppServices):
    """Answer again the user message that reply ``message_id`` answered (a fork, like an edit); streams like /messages.

    The regenerated turn is a complete one: memory learns from it (also after a stopped reply)."""
    async with holding_run_slot(services, chat.thread_id, user, "regenerate") as run_id:
        human = await question_of(services.graph, chat.thread_id, message_id)
        base = await checkpoint_before(services.graph, chat.thread_id, human.id, to="regenerate this reply")
        # The same message (same id) again: only the reply is new.
        handle = services.runs.launch(run_id, turn_spec(chat, user, "regenerate", {"messages": [human]}, user_text=human.text, fork_from=base))
    return await sse_response(handle)


async def question_of(graph, chat_id: str, reply_id: str) -> HumanMessage:
    """The user message that the assistant reply ``reply_id`` answers, on the thread's current branch."""
    messages = (await graph.aget_state(config_of(chat_id))).values.get("messages", [])
    index = next((i for i, m in enumerate(messages) if m.id == reply_id), None)
    if index is None:
        raise ApiError(404, "not_found", f"No message {reply_id} in this chat.")
    if not isinstance(messages[index], AIMessage) or messages[index].tool_calls:
        raise ApiError(422, "invalid_request", "Only an assistant reply can be regenerated; to change a user message, edit it.")
    human = next((m for m in reversed(messages[:index]) if isinstance(m, HumanMessage)), None)
    if human is None:
        raise ApiError(422, "invalid_request", "This reply answers no user message; there is nothing to regenerate it from.")
    return human


NEAR_HEAD = 6  # checkpoints looked at one by one before bisecting: a turn writes ~5


async def checkpoint_before(graph, chat_id: str, message_id: str, *, to: str = "edit it") -> dict:
    """Config of the checkpoint just before ``message_id`` entered the thread's current branch.
    ``to``: what the caller does from there, said when that checkpoint is gone ("regenerate its reply")."""
    head = await graph.aget_state(config_of(chat_id))
    target = next((m for m in head.values.get("messages", []) if m.id == message_id), None)
    if target is None:
        raise ApiError(404, "not_found", f"No message {message_id} in this chat.")
    if not isinstance(target, HumanMessage):
        raise ApiError(422, "invalid_request", "Only user messages can be edited.")
    # The branch's ids from the head (one statement, nothing decoded); the newest checkpoint without
    # the message is looked for among the few next to the head (a regenerate's, an edit of the last
    # turn's), then by bisection: once in the branch, a message stays in every newer checkpoint.
    # Listing the history decoded every checkpoint of every branch (~13 s of a worker's CPU at
    # 1,000 messages); walking back one by one decodes the chat's whole message list per turn walked.
    saver = graph.checkpointer
    ids = await checkpoint_rows.branch_ids(saver.conn, chat_id)
    at = lambda i: {"configurable": {"thread_id": chat_id, "checkpoint_ns": "", "checkpoint_id": ids[i]}}  # noqa: E731

    async def holds_message(i: int) -> bool:
        tup = await saver.aget_tuple(at(i))
        return tup is not None and any(m.id == message_id for m in tup.checkpoint["channel_values"].get("messages") or [])

    holds, lacks = 0, len(ids)  # ids[0] is the head, which holds it
    while holds + 1 < min(lacks, NEAR_HEAD + 1):
        if not await holds_message(holds + 1):
            lacks = holds + 1
            break
        holds += 1
    while lacks - holds > 1:
        middle = (holds + lacks) // 2
        if await holds_message(middle):
            holds = middle
        else:
            lacks = middle
    if lacks == len(ids):
        raise ApiError(
            409,
            "history_unavailable",
            f"The checkpoint before this message is gone (a chat's last {checkpoint_rows.HISTORY_ENV} turns keep "
            f"theirs; a forget or a deletion prunes the older ones), so there is no point to {to} from.",
        )
    snap = await graph.aget_state(at(lacks))
    # That is the turn's input checkpoint; its parent is where the previous turn ended (a cleaner fork point).
    if snap.next == ("__start__",) and lacks + 1 < len(ids):
        snap = await graph.aget_state(at(lacks + 1))
    return snap.config


async def stop_all_user_runs(services: Services, user: str) -> None:
    """Used by DELETE /me: stop the user's replies everywhere and wait for them to end."""
    pool = services.backend.pool
    runs = await chat_runs.request_stop_for_user(pool, user)
    for run in runs:
        services.runs.stop_local(run.run_id)
    await asyncio.gather(*(services.runs.wait_stopped(r, timeout=STOP_WAIT_SECONDS) for r in runs))
