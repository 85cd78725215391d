"""load_context: validate the new message and load what we know about the user."""

from __future__ import annotations

import logging

from langchain_core.messages import RemoveMessage
from langgraph.runtime import Runtime

from core.context import Context, get_context, thread_id_of
from core.text_validation import validate_user_text
from core.messages import current_turn
from core.state import State
from core.errors import InvalidMessage
from memory.recall import load_user_context

log = logging.getLogger(__name__)


async def load_context(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    human, _ = current_turn(state.messages)
    if human is None:
        return {"error": "There is no user message to answer."}
    try:
        validate_user_text(human.text, ctx.max_message_chars)
    except InvalidMessage as exc:
        # Take the refused message back out, so the thread holds nothing half-done.
        return {"messages": [RemoveMessage(id=human.id)], "error": str(exc)}
    thread_id = thread_id_of(runtime)
    loaded = await load_user_context(
        runtime.store, ctx.user_id, human.text, thread_id=thread_id, max_facts=ctx.max_facts
    )
    return {
        "loaded_context": loaded,
        "error": None,
        "tool_steps": 0,
        "user_turns": state.user_turns + 1,
        # Fresh per-turn fields, so Studio shows only this turn's contributions.
        "retrieved_chunks": [],
        "memory_written": {},
    }
