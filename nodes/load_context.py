"""load_context: validate the new message and load what we know about the user."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

from langchain_core.messages import AIMessage, RemoveMessage
from langgraph.runtime import Runtime

import prompts

from core.context import Context, get_context, thread_id_of
from core.contracts import Excerpt
from core.text_validation import validate_user_text
from core.messages import current_turn, sent_at, stamp_sent_at
from core.state import UNSTORABLE, State
from core.errors import InvalidMessage
from memory import episodes
from memory.recall import load_user_context
from nodes.compaction import model_view
from storage.memory_store import memory_store

log = logging.getLogger(__name__)


async def load_context(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    # An unknown variant fails the turn now, saying so, not every fold after the reply (quietly).
    prompts.summary_variant(ctx.summary_prompt)
    human, _ = current_turn(state.messages)
    if human is None:
        return {"error": "There is no user message to answer."}
    try:
        check_turn_message(human, ctx)
    except InvalidMessage as exc:
        # Take the refused message back out, so the thread holds nothing half-done.
        return {"messages": [RemoveMessage(id=human.id)], "error": str(exc)}
    thread_id = thread_id_of(runtime)
    now, said = datetime.now(timezone.utc), sent_at(human)
    update: dict = {}
    # The message's time, kept with it from now on. A sender's own time (an API client's, an import's)
    # is kept, unless it is later than now: a clock running ahead would date "tomorrow" from a day to
    # come and keep its chat first in every list for good. So is any other message given a time to come.
    ahead = _dated_ahead(state.messages, now)
    if ahead:
        log.warning("%d message(s) dated after the server's %s are dated now.", len(ahead), now.isoformat())
    if said is None or said > now:
        ahead = [*ahead, human] if said is None else ahead
        said = now
    if ahead:
        update["messages"] = [stamp_sent_at(m.model_copy(), now, replace=True) for m in ahead]
    loaded, excerpts = await asyncio.gather(
        load_user_context(runtime.store, ctx.user_id, human.text, thread_id=thread_id, max_facts=ctx.max_facts),
        _excerpts(runtime.store, ctx.user_id, human.text, thread_id, state, ctx.episodic_token_budget, said),
    )
    loaded["excerpts"] = excerpts
    return {
        **update,
        "loaded_context": loaded,
        "error": None,
        "tool_steps": 0,
        "user_turns": state.user_turns + 1,
        # Fresh per-turn fields, so Studio shows only this turn's contributions.
        "retrieved_chunks": [],
        "memory_written": {},
    }


def check_turn_message(human, ctx: Context) -> None:
    """Raise InvalidMessage when the turn's message is one load_context refuses.

    retrieve and reply check it again: a state write that names a later node (Studio's state editor,
    ``update_state(..., as_node="load_context")``) starts the next run past load_context, and its
    message must not be embedded or sent to the model unchecked (the server refuses a ``Command``
    that goes past load_context for the same reason, app/studio/auth.py)."""
    if why := human.additional_kwargs.get(UNSTORABLE):  # replaced as it came in (core.state): refused all the same
        raise InvalidMessage(f"The message {why}.")
    validate_user_text(human.text, ctx.max_message_chars)


def _dated_ahead(messages, now: datetime) -> list:
    """The messages dated after ``now``, looked for back to the newest reply dated before it: what
    came earlier was looked at by an earlier turn (a scan of the whole chat cost ~1.3 ms a turn at
    5,000 messages)."""
    ahead = []
    for m in reversed(messages):
        when = sent_at(m)
        if when is not None and when > now:
            ahead.append(m)
        elif when is not None and isinstance(m, AIMessage):
            break
    return ahead[::-1]


async def _excerpts(store, user_id: str, query: str, thread_id: str | None, state: State, budget: int, now: datetime) -> list[Excerpt]:
    """What was said in earlier turns and chats that bears on the message, minus what the model
    already sees (this thread's messages after the compaction cursor)."""
    if budget <= 0:
        return []
    ours = memory_store(store)
    in_view = [m.id for m in model_view(state.messages, state.summarized_through) if m.id]
    # Ranked, not packed: the reply prompt packs them into what its other sections leave.
    return await episodes.recall_ranked(
        ours.pool, ours.embeddings, user_id, query, store=store, thread_id=thread_id, exclude=in_view, token_cap=budget,
        now=now,
    )
