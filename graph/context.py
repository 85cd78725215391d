"""Run-time configuration of one turn: the graph's ``context_schema``.

Studio renders these fields as the assistant's settings form. Callers may pass no
``context`` at all (``runtime.context`` is then None), so nodes go through
:func:`get_context`, which applies the defaults below.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from langgraph.runtime import Runtime

from graph.auth_user import effective_user_id


_OFF = {"off", "0", "false", "no"}


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


@dataclass(kw_only=True)
class Context:
    """Settings for one turn. Environment variables give the defaults where noted."""

    user_id: str = field(
        default="local",
        metadata={"description": "Whose memory this turn reads and writes. Under auth it is set by the server, never by the client."},
    )
    model: str = field(
        default_factory=lambda: _env("MEMORY_AGENT_MODEL", "auto"),
        metadata={
            "description": "Chat model: any init_chat_model string such as 'openai:gpt-4.1-mini', "
            "'offline' for the built-in rule-based model, or 'auto' (OpenAI when OPENAI_API_KEY or "
            "OPENAI_BASE_URL is set, else offline). Env: MEMORY_AGENT_MODEL."
        },
    )
    persona: str = field(
        default="assistant",
        metadata={"description": "Named persona from prompts/personas (assistant, tutor, planner)."},
    )
    system_prompt: str = field(
        default="",
        metadata={"description": "Overrides the persona's system prompt when not empty."},
    )
    summary_prompt: str = field(
        default_factory=lambda: _env("MEMORY_AGENT_SUMMARY_PROMPT", "structured"),
        metadata={"description": "Summarization prompt variant from prompts/summary_variants (narrative, structured, fact_preserving)."},
    )
    summary_window: int = field(
        default=30,
        metadata={"description": "Fold the oldest messages once more than this many are unsummarized."},
    )
    tail_size: int = field(
        default=12,
        metadata={"description": "How many of the newest messages stay raw after a fold."},
    )
    max_context_tokens: int = field(
        default=6000,
        metadata={"description": "Token budget of the unsummarized conversation; passing it also triggers a fold."},
    )
    max_summary_tokens: int = field(
        default=600,
        metadata={"description": "The running summary is re-compressed (summary of summaries) when it grows past this."},
    )
    max_message_chars: int = field(
        default=20000,
        metadata={"description": "Longest user message accepted; longer ones are refused with a clear error."},
    )
    extract_every_n_turns: int = field(
        default=1,
        metadata={"description": "Run memory extraction every N user turns (cost control). 0 disables it."},
    )
    max_facts: int = field(default=7, metadata={"description": "At most this many facts go into the prompt (at least 3 when stored)."})
    rag_collection: str = field(
        default="",
        metadata={"description": "Knowledge-base collection to search ('' searches all)."},
    )
    rag_top_k: int = field(default=6, metadata={"description": "How many knowledge chunks at most go into the prompt."})
    rag_token_budget: int = field(default=1200, metadata={"description": "Token budget of the relevant-knowledge section."})
    user_context_token_budget: int = field(default=800, metadata={"description": "Token budget of the user-context section."})
    max_tool_steps: int = field(default=4, metadata={"description": "Most model→tool round trips in one reply."})
    max_reply_tokens: int = field(
        default_factory=lambda: int(_env("MEMORY_AGENT_MAX_REPLY_TOKENS", "0")),
        metadata={
            "description": "Most tokens one reply may generate (0: the model's own limit). Small local models "
            "sometimes loop until their context is full. Env: MEMORY_AGENT_MAX_REPLY_TOKENS."
        },
    )
    tools: bool = field(
        default_factory=lambda: _env("MEMORY_AGENT_TOOLS", "on").strip().casefold() not in _OFF,
        metadata={
            "description": "Offer the memory and task tools to the model. Turn off for small local models "
            "that write tool calls as text or pick tools at random. Env: MEMORY_AGENT_TOOLS=off."
        },
    )

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> "Context":
        """Build from a JSON-like mapping, ignoring unknown keys."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (values or {}).items() if k in known})

    def __post_init__(self) -> None:
        # Studio and JSON callers may send numbers as strings.
        for f in fields(self):
            if f.type in ("int", int) and isinstance(getattr(self, f.name), str):
                setattr(self, f.name, int(getattr(self, f.name)))
            if f.type in ("bool", bool) and isinstance(getattr(self, f.name), str):
                setattr(self, f.name, getattr(self, f.name).strip().casefold() not in _OFF)
        if self.tail_size < 1:
            raise ValueError("tail_size must be at least 1: the newest message is never folded")
        if self.summary_window < self.tail_size:
            raise ValueError("summary_window must be at least tail_size")


def get_context(runtime: Runtime[Context] | None) -> Context:
    """The turn's context with defaults applied, also when the caller passed none."""
    ctx = getattr(runtime, "context", None) if runtime is not None else None
    if ctx is None:
        ctx = Context()
    elif isinstance(ctx, dict):
        ctx = Context.from_mapping(ctx)
    elif not isinstance(ctx, Context):
        raise TypeError(f"unexpected context type {type(ctx).__name__}")
    # Under LangGraph Server the authenticated user wins over any client-sent user_id.
    user_id = effective_user_id(runtime, ctx)
    return ctx if user_id == ctx.user_id else replace(ctx, user_id=user_id)


def thread_id_of(runtime: Runtime | None) -> str | None:
    """The thread this run belongs to (None without a checkpointer)."""
    info = getattr(runtime, "execution_info", None)
    return getattr(info, "thread_id", None)
