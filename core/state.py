"""The graph's state: the full history plus what each node contributed to the turn.

Only JSON-friendly values live here (dicts, lists, strings), so checkpoints stay
readable in Studio and psql and deserialize without a type allow-list. The shapes of what
recall and retrieval put here are TypedDicts (``core.contracts``): plain dicts at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Sequence

from langchain_core.messages import AnyMessage
from langgraph.graph import add_messages

from core.contracts import Chunk, LoadedContext

LAST_NODE = "extract_memories"
"""The graph's last node, which graph/assembly.py ends the memory phase with. Here because memory/
(below the assembly) writes states as if it had just run: ``update_state(..., as_node=LAST_NODE)``
leaves nothing pending, as a finished turn does."""


@dataclass(kw_only=True)
class InputState:
    """What a caller sends: new messages. ``messages`` keeps the *full* history (Studio chat mode)."""

    messages: Annotated[Sequence[AnyMessage], add_messages] = field(default_factory=list)


@dataclass(kw_only=True)
class State(InputState):
    # Active conversation memory: the model sees summary + messages after the cursor.
    summary: dict[str, Any] = field(default_factory=dict)
    """The running SummaryBoard (as a dict); empty until the first fold."""
    summarized_through: str | None = None
    """Id of the last message the summary covers (the compaction cursor)."""
    summary_folds: int = 0
    """How many folds built the summary (each one incremental)."""

    # What each node put into this turn, shown in Studio's state view.
    loaded_context: LoadedContext = field(default_factory=dict)
    """load_context: profile, preferences, ranked facts, open tasks, related chats, excerpts."""
    retrieved_chunks: list[Chunk] = field(default_factory=list)
    """retrieve: knowledge-base chunks with source, chunk index and scores."""
    memory_written: dict[str, Any] = field(default_factory=dict)
    """extract_memories: facts, preferences, profile fields and tasks written this turn."""
    turn_usage: dict[str, Any] = field(default_factory=dict)
    """reply: prompt sections' token counts, tokens in/out, model name."""

    error: str | None = None
    """Why this turn was refused (the refused message is removed again); None when it ran."""

    user_turns: int = 0
    """User turns seen on this thread (drives extract_every_n_turns)."""
    tool_steps: int = 0
    """Model→tool round trips in the current reply (bounded by max_tool_steps)."""
