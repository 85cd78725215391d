"""summarize: fold old messages into the running summary and keep the chat's record current."""

from __future__ import annotations

import logging

from langchain_core.messages import AIMessage, HumanMessage

from core.messages import adds_no_evidence
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from nodes.compaction import plan_fold, unsummarized
from core.context import Context, get_context, thread_id_of
from core.metrics import SUMMARY_FAILURES, count_failure, count_tokens_used, timed
from core.state import State
from nodes.stream_events import NOSTREAM, emit
from core.tokens import count_tokens
from llm.chat_model import OFFLINE, load_chat_model, resolve_model_name
from core.statements import states_something
from memory.chat_titles import keyword_title, needs_model_title
from core.errors import ModelOutputError
from core.messages import sent_at
from core.schemas import ChatRecord, SummaryBoard, utcnow
from memory import episodes
from memory.forgetting import redact_board, redactor_for
from memory.summarizer import fold_summary, make_first_title, make_title, recompress_summary
from memory.writer.records import save_chat_record
from memory.user_memory import get_chat
from storage import thread_owners
from storage.memory_store import memory_store

log = logging.getLogger(__name__)

RECENT_SEARCH_CHARS = 600
OPENING_SEARCH_CHARS = 300


def searchable_text(board: SummaryBoard, messages, *, title: str = "", opening: str = "") -> str:
    """What a chat is found by, most telling first (the embedding reads ~256 tokens): its title,
    its opening message, the summary board once there is one, and the newest user lines not yet folded."""
    recent_user = [m.text for m in messages if isinstance(m, HumanMessage)]
    tail = " / ".join(recent_user[-6:])[-RECENT_SEARCH_CHARS:]
    parts = [title.strip()] if title.strip() and title != "New chat" else []
    if opening.strip():
        parts.append(f"Opening: {opening.strip()[:OPENING_SEARCH_CHARS]}")
    if not board.is_empty():
        parts.append(board.render())
    if tail and tail != opening.strip()[-RECENT_SEARCH_CHARS:]:
        parts.append(f"Recently: {tail}")
    return "\n".join(parts)


async def summarize(state: State, runtime: Runtime[Context]) -> dict:
    try:
        return await _summarize(state, runtime)
    except GraphBubbleUp:
        raise
    except Exception as exc:  # what the steps below do not handle themselves (the chat record's write)
        count_failure(SUMMARY_FAILURES, exc)
        raise


async def _summarize(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    board = SummaryBoard.model_validate(state.summary) if state.summary else SummaryBoard()
    update: dict = {}
    folded = plan_fold(
        state.messages,
        state.summarized_through,
        window=ctx.summary_window,
        tail=ctx.tail_size,
        max_tokens=ctx.max_context_tokens,
    )
    model = load_chat_model(ctx.model)
    thread_id = thread_id_of(runtime)
    # What the user had forgotten never reaches the summarizer, the title or the chat's record.
    redactor = await redactor_for(runtime.store, ctx.user_id)
    if redactor:
        board = redact_board(board, redactor)
    if folded:
        try:
            with timed("summarize"):
                evidence = [m for m in folded if not adds_no_evidence(m)]  # a memory echo or a no-answer note adds nothing
                result = await fold_summary(model, board, redactor.messages_of(evidence, thread_id), ctx.summary_prompt, config=NOSTREAM)
                new_board = result.value
                count_tokens_used("summarize", result.input_tokens, result.output_tokens)
                if count_tokens(new_board.render()) > ctx.max_summary_tokens:
                    new_board = await _recompressed(model, new_board, ctx)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            # Keep the old summary and cursor: the same messages are folded on a later turn.
            # A provider failure (HTTP error, timeout) must not fail a turn that already has its answer.
            count_failure(SUMMARY_FAILURES, exc, model_call=True)
            log.warning("summary fold skipped: %s", exc, exc_info=not isinstance(exc, ModelOutputError))
            emit({"event": "summary", "error": str(exc)})
        else:
            board = new_board
            update = {
                "summary": board.model_dump(mode="json"),
                "summarized_through": folded[-1].id,
                "summary_folds": state.summary_folds + 1,
            }
            emit({"event": "summary", "folded_messages": len(folded), "summary": board.render()})

    if thread_id and runtime.store is not None:
        if await _update_chat_record(runtime, ctx, thread_id, board, state, update.get("summarized_through"), model, redactor):
            await _index_messages(runtime, ctx, thread_id, state, redactor)
    return update


async def _index_messages(runtime, ctx: Context, thread_id: str, state: State, redactor) -> None:
    """The episodic index after the reply (nothing of it before the first token). Derived data:
    a failure is logged and the next turn's sync writes what this one missed."""
    saver = memory_store(runtime.store).checkpoint_reader()  # dates messages from before times were kept
    try:
        with timed("index_messages"):
            await episodes.index_for_run(runtime.store, ctx.user_id, thread_id, state.messages, checkpointer=saver, redactor=redactor)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        log.warning("episodic index not updated for thread %s: %s", thread_id, exc, exc_info=True)


async def _recompressed(model, board: SummaryBoard, ctx: Context) -> SummaryBoard:
    """Summary of summaries; when that call fails the fold still counts (the prompt trims the long board)."""
    try:
        again = await recompress_summary(model, board, ctx.max_summary_tokens, ctx.summary_prompt, config=NOSTREAM)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        # Dropping the fold here would refold (and fail on) the same messages every turn.
        count_failure(SUMMARY_FAILURES, exc, model_call=True)
        log.warning("summary recompression skipped; keeping the longer summary: %s", exc)
        return board
    count_tokens_used("summarize", again.input_tokens, again.output_tokens)
    return again.value


async def _update_chat_record(runtime, ctx: Context, thread_id: str, board: SummaryBoard, state: State, cursor, model, redactor) -> bool:
    """Write the chat's record; False when the thread is another user's (nothing written)."""
    store = runtime.store
    # A thread run without an owner yet (the CLI, evals, a kept stateless run) becomes the
    # run's user's, so its record and its ownership agree. Entry points check before the run;
    # this only refuses to file another user's chat among this user's.
    try:
        await thread_owners.claim_ownership(memory_store(store).pool, thread_id, ctx.user_id)
    except thread_owners.ThreadTaken as exc:
        log.warning("chat record not written: %s", exc)
        return False
    chat = await get_chat(store, ctx.user_id, thread_id) or ChatRecord(thread_id=thread_id, persona=ctx.persona)
    messages = redactor.messages_of(state.messages, thread_id)
    first = next((m for m in messages if isinstance(m, HumanMessage)), None)
    if chat.title == "New chat" and not chat.title_by_user and first is not None:
        chat.title = await _first_title(model, ctx, messages, first)
    if needs_model_title(chat, board):
        try:
            titled = await make_title(model, board, config=NOSTREAM)
            chat.title = titled.value.title.strip()[:120] or chat.title
            chat.title_topics = list(board.topics)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # invalid output or a provider failure: keep the current title
            count_failure(SUMMARY_FAILURES, exc, model_call=True)
            log.warning("chat title not updated: %s", exc)
    chat.summary_text = searchable_text(
        board, unsummarized(messages, cursor or state.summarized_through), title=chat.title, opening=first.text if first else ""
    )
    chat.message_count = len(state.messages)
    chat.user_statements = sum(1 for m in state.messages if isinstance(m, HumanMessage) and states_something(m.text))
    # The time of its newest message: now for a live turn, the source's time for an imported history.
    chat.last_activity = max(filter(None, map(sent_at, state.messages)), default=None) or utcnow()
    await save_chat_record(store, ctx.user_id, chat)
    return True


async def _first_title(model, ctx: Context, messages, first: HumanMessage) -> str:
    """The title of a new chat, from its first exchange: the model's when there is a model and a
    reply, else (offline, no reply yet, or the call failed) a keyword title of the opening message."""
    offline = resolve_model_name(ctx.model).startswith(OFFLINE)  # "offline" and "offline-slow…"
    start = messages.index(first)
    reply = next((m for m in messages[start + 1 :] if isinstance(m, AIMessage) and m.text.strip() and not m.tool_calls), None)
    if offline or reply is None:
        return keyword_title(first.text)
    try:
        titled = await make_first_title(model, [first, reply], config=NOSTREAM)
    except GraphBubbleUp:
        raise
    except Exception as exc:  # invalid output or a provider failure: the keyword title will do
        log.warning("chat title from the first exchange failed; using a keyword title: %s", exc)
        return keyword_title(first.text)
    count_tokens_used("title", titled.input_tokens, titled.output_tokens)
    return titled.value.title.strip()[:120] or keyword_title(first.text)
