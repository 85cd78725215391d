"""summarize: fold old messages into the running summary and keep the chat's record current."""

from __future__ import annotations

import logging

from langchain_core.messages import HumanMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from nodes.compaction import plan_fold, unsummarized
from core.context import Context, get_context, thread_id_of
from core.metrics import SUMMARY_FAILURES, count_failure, count_tokens_used, timed
from core.state import State
from nodes.stream_events import NOSTREAM, emit
from core.tokens import count_tokens
from llm.chat_model import load_chat_model
from memory.chat_titles import needs_model_title, provisional_title
from core.errors import ModelOutputError
from core.schemas import ChatRecord, SummaryBoard, utcnow
from memory.summarizer import fold_summary, make_title, recompress_summary
from memory.memory_writer import save_chat_record
from memory.user_memory import get_chat
from storage import thread_owners

log = logging.getLogger(__name__)

RECENT_SEARCH_CHARS = 600



def searchable_text(board: SummaryBoard, messages) -> str:
    """What a chat is found by: the summary board plus the newest user lines not yet folded."""
    recent_user = [m.text for m in messages if isinstance(m, HumanMessage)]
    tail = " / ".join(recent_user[-6:])[-RECENT_SEARCH_CHARS:]
    parts = [board.render()] if not board.is_empty() else []
    if tail:
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
    if folded:
        try:
            with timed("summarize"):
                result = await fold_summary(model, board, folded, ctx.summary_prompt, config=NOSTREAM)
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

    thread_id = thread_id_of(runtime)
    if thread_id and runtime.store is not None:
        await _update_chat_record(runtime, ctx, thread_id, board, state, update.get("summarized_through"), model)
    return update


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


async def _update_chat_record(runtime, ctx: Context, thread_id: str, board: SummaryBoard, state: State, cursor, model) -> None:
    store = runtime.store
    # A thread run without an owner yet (the CLI, evals, a kept stateless run) becomes the
    # run's user's, so its record and its ownership agree. Entry points check before the run;
    # this only refuses to file another user's chat among this user's.
    pool = thread_owners.pool_of(store)
    if pool is not None:
        try:
            await thread_owners.claim(pool, thread_id, ctx.user_id)
        except thread_owners.ThreadTaken as exc:
            log.warning("chat record not written: %s", exc)
            return
    chat = await get_chat(store, ctx.user_id, thread_id) or ChatRecord(thread_id=thread_id, persona=ctx.persona)
    if chat.title == "New chat" and not chat.title_by_user:
        first = next((m for m in state.messages if isinstance(m, HumanMessage)), None)
        if first is not None:
            chat.title = provisional_title(first.text)
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
    chat.summary_text = searchable_text(board, unsummarized(state.messages, cursor or state.summarized_through))
    chat.message_count = len(state.messages)
    chat.last_activity = utcnow()
    await save_chat_record(store, ctx.user_id, chat)
