"""summarize: fold old messages into the running summary (the memory phase's first step).

The chat's record (``record_chat``) and the index of what was said (``index_messages``) come
after it in the graph: the record's title and searchable text read the board this fold leaves."""

from __future__ import annotations

import logging

from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from core.context import Context, get_context, thread_id_of
from core.errors import ModelOutputError
from core.messages import adds_no_evidence
from core.metrics import SUMMARY_FAILURES, count_failure, count_tokens_used, timed
from core.schemas import SummaryBoard
from core.state import State
from core.tokens import count_tokens
from llm.chat_model import load_chat_model
from memory.forgetting import STATE_CHANNELS, redact_state, redactor_for
from memory.summarizer import fold_summary, recompress_summary
from nodes.compaction import plan_fold
from nodes.stream_events import NOSTREAM, emit

log = logging.getLogger(__name__)


async def summarize(state: State, runtime: Runtime[Context]) -> dict:
    try:
        return await _summarize(state, runtime)
    except GraphBubbleUp:
        raise
    except Exception as exc:  # what the fold below does not handle itself (the redactor's read, say)
        count_failure(SUMMARY_FAILURES, exc)
        raise


async def _summarize(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    # Every run, fold or not: a turn forked from a checkpoint older than a forget, or one that
    # loaded its state before the forget committed, must not write the forgotten words back. (The
    # ledger as committed: extract_memories, the turn's last node, reads it again under the user's
    # lock, for a forget that commits meanwhile; one lock a turn is enough.)
    redactor = await redactor_for(runtime.store, ctx.user_id)
    update: dict = redact_state({c: getattr(state, c) for c in STATE_CHANNELS}, redactor)
    summary = update.get("summary", state.summary)
    board = SummaryBoard.model_validate(summary) if summary else SummaryBoard()
    folded = plan_fold(
        state.messages,
        state.summarized_through,
        window=ctx.summary_window,
        tail=ctx.tail_size,
        max_tokens=ctx.max_context_tokens,
    )
    if folded:
        model = load_chat_model(ctx.model)
        thread_id = thread_id_of(runtime)
        # What the user had forgotten never reaches the summarizer (the board is redacted above).
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
            update |= {
                "summary": board.model_dump(mode="json"),
                "summarized_through": folded[-1].id,
                "summary_folds": state.summary_folds + 1,
            }
            emit({"event": "summary", "folded_messages": len(folded), "summary": board.render()})
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
