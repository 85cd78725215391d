"""index_messages: add the turn's messages to the index of what was said (memory.episodes).

After ``record_chat``, which claimed the thread: the index's own write refuses a thread another
user owns (``storage.episodes.sync_thread``), so nothing is filed under someone else's chat.
Runs after the reply, so nothing of it delays the first token.
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
    ctx = get_context(runtime)
    if not thread_id or runtime.store is None or not ctx.keep_chat:  # (a thread not kept leaves no rows behind)
        return {}
    try:
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
    except thread_owners.ThreadTaken as exc:  # record_chat found it another user's, and filed nothing either
        log.warning("nothing of this run indexed under the thread: %s", exc)
    except Exception as exc:
        log.warning("episodic index not updated for thread %s: %s", thread_id, exc, exc_info=True)
    return {}

