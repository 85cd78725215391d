"""Replay a conversation through the production ``extract_memories`` node, from one speaker's side.

The extractor stores facts about *the user*, so a two-speaker conversation is
replayed once per speaker that has gold facts: that speaker's turns are the
user messages, the other's the assistant replies (``conversation_replay``),
and the memories go to a user of their own. The node runs once per user
message, after the replies that follow it (as in the chat graph, where it runs
at the end of every turn), with ``user_turns`` counting user messages.

What the user ends up with is read back from the store: active facts, plus
profile fields and free-form preference notes written as sentences ("Lives in
Lisbon"), since the extractor puts some facts there instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from langchain_core.messages import BaseMessage

from evals.conversation_replay import replay_turns
from evals.datasets.schema import Conversation
from evals.metered_model import CallMeter, CallRecord
from evals.production_nodes import single_node_graph
from core.context import Context
from memory.user_memory import get_user_document, list_facts

__all__ = ["ExtractionReplay", "PROFILE_SENTENCES", "replay_extraction", "stored_memories"]

PROFILE_SENTENCES = {
    "name": "Name is {}",
    "location": "Lives in {}",
    "role": "Works as {}",
    "native_language": "Native language is {}",
    "level": "Level is {}",
}


@dataclass
class ExtractionReplay:
    conversation_id: str
    speaker: str
    user_id: str
    replayed_turn_ids: list[str]
    node_runs: int
    memories: list[str]  # what the store holds for this user at the end (see stored_memories)
    writer: Counter = field(default_factory=Counter)  # summed WriteReport counts: facts_added, facts_merged, ...
    failures: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)


async def stored_memories(store, user_id: str) -> list[str]:
    """Active facts, then profile fields and preference notes as sentences."""
    out = [f.text for f in await list_facts(store, user_id)]
    doc = await get_user_document(store, user_id)
    for name, template in PROFILE_SENTENCES.items():
        value = getattr(doc.profile, name)
        if value:
            out.append(template.format(value))
    out += [f"Goal: {g}" for g in doc.profile.goals]
    out += list(doc.preferences.other_notes)
    return out


async def replay_extraction(
    conversation: Conversation,
    speaker: str,
    *,
    context: Context,
    store,
    meter: CallMeter,
    thread_id: str,
    max_turns: int | None = None,
    on_turn: Callable[[int], None] | None = None,
) -> ExtractionReplay:
    graph = single_node_graph("extract_memories", store)
    turns = replay_turns(conversation, human=speaker)
    if max_turns is not None:
        turns = turns[:max_turns]
    config = {"configurable": {"thread_id": thread_id}}
    history: list[BaseMessage] = []
    writer: Counter = Counter()
    failures: list[str] = []
    user_turns = 0
    node_runs = 0
    first_call = len(meter.records)

    async def run() -> None:
        nonlocal node_runs
        out = await graph.ainvoke({"messages": list(history), "user_turns": user_turns}, config, context=context)
        node_runs += 1
        written = out.get("memory_written") or {}
        if written.get("error"):
            failures.append(str(written["error"]))
        for key, value in written.items():
            if isinstance(value, list):
                writer[key] += len(value)
            elif key in ("profile_changes", "preference_changes") and isinstance(value, dict):
                writer[key] += len(value)

    for i, turn in enumerate(turns):
        next_is_human = i + 1 < len(turns) and turns[i + 1].is_human
        history.append(turn.message)
        if turn.is_human:
            user_turns += 1
        # The exchange ends before the next user message (or at the end): that is when the node runs.
        if user_turns and (next_is_human or i + 1 == len(turns)):
            await run()
        if on_turn:
            on_turn(i + 1)
    return ExtractionReplay(
        conversation_id=conversation.id,
        speaker=speaker,
        user_id=context.user_id,
        replayed_turn_ids=[t.turn_id for t in turns if t.turn_id],
        node_runs=node_runs,
        memories=await stored_memories(store, context.user_id),
        writer=writer,
        failures=failures,
        calls=meter.since(first_call),
    )
