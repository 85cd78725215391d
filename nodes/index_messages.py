"""index_messages: add the turn's messages to the index of what was said (memory.episodes).

After ``record_chat``, which claimed the thread: only a thread the run's user owns is indexed
under that user. Runs after the reply, so nothing of it delays the first token.
"""

from __future__ import annotations

import logging

from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from core.context import Context, get_context, thread_id_of
from core.metrics import SUMMARY_FAILURES, count_failure, timed
from core.state import State
from memory import episodes
from memory.forgetting import redactor_for
from storage import thread_owners
from storage.memory_store import memory_store

log = logging.getLogger(__name__)


async def index_messages(state: State, runtime: Runtime[Context]) -> dict:
    thread_id = thread_id_of(runtime)
    if not thread_id or runtime.store is None:
        return {}
    ctx = get_context(runtime)
    try:
        if not await _users_thread(runtime.store, thread_id, ctx.user_id):
            return {}
        redactor = await redactor_for(runtime.store, ctx.user_id)
        saver = memory_store(runtime.store).checkpoint_reader()  # dates messages from before times were kept
    except GraphBubbleUp:
        raise
    except Exception as exc:  # as record_chat counts the same reads failing
        count_failure(SUMMARY_FAILURES, exc)
        raise
    # Derived data: a failure is logged and the next turn's sync writes what this one missed.
    try:
        with timed("index_messages"):
            await episodes.index_for_run(runtime.store, ctx.user_id, thread_id, state.messages, checkpointer=saver, redactor=redactor)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        log.warning("episodic index not updated for thread %s: %s", thread_id, exc, exc_info=True)
    return {}


async def _users_thread(store, thread_id: str, user_id: str) -> bool:
    """record_chat claimed the thread or found it another user's (and wrote nothing): index
    only what it claimed."""
    return await thread_owners.owner_of(memory_store(store).pool, thread_id) == user_id
