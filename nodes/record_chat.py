"""record_chat: claim the thread for the run's user and keep the chat's record (title, searchable text),
and its checkpoint history to its last turns (storage.checkpoint_rows.trim_history).

After ``summarize``: the title and the searchable text read the board the fold left. Before
``index_messages``: the claim is what lets anything of this user be filed under the thread.
"""

from __future__ import annotations

import logging

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from core.context import Context, get_context, thread_id_of
from core.messages import sent_at
from core.metrics import SUMMARY_FAILURES, count_failure, count_tokens_used
from core.schemas import NEW_CHAT_TITLE, ChatRecord, utcnow
from core.state import State
from core.statements import states_something
from llm.chat_model import OFFLINE, load_chat_model, resolve_model_name
from memory.chat_text import date_title, shown_title
from memory.chat_titles import keyword_title, needs_model_title
from memory.forgetting import redacted_chat
from memory.summarizer import make_first_title, make_title
from memory.user_memory import get_chat
from memory.writer.records import save_chat_record
from nodes.stream_events import NOSTREAM
from storage import checkpoint_rows, thread_owners
from storage.memory_store import memory_store

log = logging.getLogger(__name__)

async def record_chat(state: State, runtime: Runtime[Context]) -> dict:
    try:
        thread_id = thread_id_of(runtime)
        ctx = get_context(runtime)
        if thread_id and runtime.store is not None and ctx.keep_chat:
            await _update_chat_record(runtime, ctx, thread_id, state)
        return {}
    except GraphBubbleUp:
        raise
    except Exception as exc:  # what the steps below do not handle themselves (the claim, the record's write)
        count_failure(SUMMARY_FAILURES, exc)
        raise


async def owns_thread(store, thread_id: str, user_id: str) -> bool:
    """Claim the thread for the run's user; False when it is another user's (nothing of this
    run may be filed under it then).

    A thread run without an owner yet (the CLI, evals, a kept stateless run) becomes the run's
    user's, so its record and its ownership agree. Entry points check before the run; this only
    refuses to file another user's chat among this user's."""
    try:
        await thread_owners.claim_ownership(memory_store(store).pool, thread_id, user_id)
    except thread_owners.ThreadTaken as exc:
        log.warning("nothing of this run filed under the thread: %s", exc)
        return False
    return True


async def _update_chat_record(runtime, ctx: Context, thread_id: str, state: State) -> None:
    store = runtime.store
    if not await owns_thread(store, thread_id, ctx.user_id):
        return
    model = load_chat_model(ctx.model)
    # What the user had forgotten never reaches the title or the chat's record.
    redacted = await redacted_chat(store, ctx.user_id, thread_id, state.messages, state.summary)
    board, messages, first = redacted.board, redacted.messages, redacted.opening
    stored = await get_chat(store, ctx.user_id, thread_id)
    chat = stored.model_copy() if stored is not None else ChatRecord(thread_id=thread_id, persona=ctx.persona)
    if chat.title == NEW_CHAT_TITLE and not chat.title_by_user and first is not None:
        # An opening that was all forgotten ("Please forget that I work as a nurse") titles the chat by its date, not "[forgotten]".
        chat.title = shown_title(await _first_title(model, ctx, messages, first)) or date_title(chat)
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
    searchable = redacted.searchable(chat.title, state.summarized_through)
    chat.summary_text = searchable.text
    chat.message_count = len(state.messages)
    chat.user_statements = sum(1 for m in state.messages if isinstance(m, HumanMessage) and states_something(m.text))
    # The time of its newest message: now for a live turn, the source's time for an imported history.
    newest = max(filter(None, map(sent_at, state.messages)), default=None)
    chat.last_activity = min(newest, utcnow()) if newest is not None else utcnow()  # never a time to come
    await save_chat_record(store, ctx.user_id, chat, read_before=stored, parts=searchable.parts)
    # A message from before messages carried their time is dated by the checkpoint it first
    # appeared in (memory.episodes.checkpoint_times): such a chat keeps its history.
    if state.user_turns % TRIM_EVERY == 0 and all(sent_at(m) is not None for m in state.messages if isinstance(m, (HumanMessage, AIMessage))):
        await _keep_recent_history(store, thread_id)


TRIM_EVERY = 10
"""Turns between two trims of the chat's checkpoint history: it then holds at most this many turns
more than MEMORY_AGENT_HISTORY_TURNS, and a turn between trims pays nothing for it."""


async def _keep_recent_history(store, thread_id: str) -> None:
    """The chat's checkpoints of its last MEMORY_AGENT_HISTORY_TURNS turns only
    (storage.checkpoint_rows.trim_history); a failure is logged, and the next trim does it."""
    try:
        await checkpoint_rows.trim_history(memory_store(store).pool, thread_id, checkpoint_rows.history_turns())
    except GraphBubbleUp:
        raise
    except Exception as exc:
        log.warning("the checkpoint history of thread %s not trimmed: %s", thread_id, exc)


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
