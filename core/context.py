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

from core.auth_user import effective_user_id
from core.env_settings import env_whole
from core.errors import SettingError


_OFF = {"off", "0", "false", "no"}
_ON = {"on", "1", "true", "yes"}


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _setting(default: Any, description: str) -> Any:
    """A Context field; Studio shows ``description`` next to it in the settings form."""
    return field(default=default, metadata={"description": description})


def _env_int_setting(env_name: str, default: int, description: str) -> Any:
    """A whole-number Context field whose default is read from ``env_name`` when a Context is made."""
    return field(default_factory=lambda: env_whole(env_name, default), metadata={"description": description, "env": env_name})


def _env_setting(env_name: str, default: str, description: str) -> Any:
    """A Context field whose default is read from ``env_name`` when a Context is made."""
    return field(default_factory=lambda: _env(env_name, default), metadata={"description": description, "env": env_name})


# Settings that protect the server (message size, tool steps, budgets): no Context may go above
# these ceilings, and the LangGraph auth handlers fix them to the server's own values, whatever a
# client sends (app.studio.auth).
# A whole-number setting's least value where it is not 0, and why.
_LEAST: dict[str, int] = {"tail_size": 1}
_WHY_LEAST: dict[str, str] = {"tail_size": ": the newest message is never folded"}

SAFETY_CEILINGS: dict[str, int] = {
    "max_message_chars": 100_000,
    "max_tool_steps": 10,
    "rag_top_k": 20,
    "rag_token_budget": 8_000,
    "user_context_token_budget": 8_000,
    "episodic_token_budget": 8_000,
    "prompt_token_budget": 200_000,
    "max_context_tokens": 200_000,
    "max_summary_tokens": 20_000,
    "summary_token_budget": 20_000,
    "max_facts": 30,
}


# The reply prompt's layouts (Context.reply_rules; prompts.reply_prompt.build_prompt).
REPLY_RULES = ("full", "brief")


@dataclass(kw_only=True)
class Context:
    """Settings for one turn. Environment variables give the defaults where noted."""

    user_id: str = _setting("local", "Whose memory this turn reads and writes. Under auth it is set by the server, never by the client.")
    model: str = _env_setting(
        "MEMORY_AGENT_MODEL",
        "auto",
        "Chat model: any init_chat_model string such as 'openai:gpt-4.1-mini', "
        "'offline' for the built-in rule-based model, or 'auto' (OpenAI when OPENAI_API_KEY or "
        "OPENAI_BASE_URL is set, else offline). Env: MEMORY_AGENT_MODEL.",
    )
    persona: str = _setting("assistant", "Named persona from prompts/personas (assistant, tutor, planner).")
    system_prompt: str = _setting("", "Overrides the persona's system prompt when not empty.")
    reply_rules: str = _env_setting(
        "MEMORY_AGENT_REPLY_RULES",
        "full",
        "How the reply prompt is laid out: 'full' (the persona, the rules for each labelled section, every "
        "section shown, '(none)' when empty) or 'brief' for small local models (the persona's first sentence, "
        "one line of rules, only the sections memory filled: the 0.5B recited the full rules or the user's "
        "message back). `memory-agent local` sets brief. Env: MEMORY_AGENT_REPLY_RULES.",
    )
    summary_prompt: str = _env_setting(
        "MEMORY_AGENT_SUMMARY_PROMPT",
        "structured",
        "Summarization prompt variant from prompts/summary_variants (narrative, structured, fact_preserving).",
    )
    summary_window: int = _setting(14, "Fold the oldest messages once more than this many are unsummarized.")
    tail_size: int = _setting(4, "How many of the newest messages stay raw after a fold.")
    max_context_tokens: int = _setting(6000, "Token budget of the unsummarized conversation; passing it also triggers a fold.")
    max_summary_tokens: int = _setting(400, "The running summary is re-compressed (summary of summaries) when it grows past this.")
    summary_token_budget: int = _setting(
        200,
        "Tokens of the running summary the reply prompt shows (from the top); the excerpts of earlier "
        "conversations take what it leaves. Below max_summary_tokens, so a fold costs no extra model call.",
    )
    max_message_chars: int = _setting(20000, "Longest user message accepted; longer ones are refused with a clear error.")
    extract_every_n_turns: int = _env_int_setting(
        "MEMORY_AGENT_EXTRACT_EVERY_N_TURNS",
        1,
        "Run memory extraction every N user turns (cost control: an extraction is a model call of "
        "~1,300 prompt tokens, tens of seconds on a local CPU model). 0 disables it. Env: MEMORY_AGENT_EXTRACT_EVERY_N_TURNS.",
    )
    max_facts: int = _setting(7, "At most this many facts go into the prompt (at least 3 when stored).")
    rag_collection: str = _setting("", "Knowledge-base collection to search ('' searches all).")
    rag_top_k: int = _setting(6, "How many knowledge chunks at most go into the prompt.")
    rag_token_budget: int = _setting(1200, "Token budget of the relevant-knowledge section.")
    user_context_token_budget: int = _setting(800, "Token budget of the user-context section.")
    episodic_token_budget: int = _setting(
        2000,
        "The most the excerpts of earlier conversations (what was said, found for the message) may take; "
        "they take what the other sections leave of prompt_token_budget. 0 turns them off.",
    )
    prompt_token_budget: int = _setting(
        2000,
        "Token budget of the whole reply prompt: each section keeps its own budget and the excerpts of "
        "earlier conversations take what the others leave. 0: the sections' own budgets only.",
    )
    max_tool_steps: int = _setting(4, "Most model→tool round trips in one reply.")
    max_reply_tokens: int = _env_int_setting(
        "MEMORY_AGENT_MAX_REPLY_TOKENS",
        0,
        "Most tokens one reply may generate (0: the model's own limit). Small local models "
        "sometimes loop until their context is full. Env: MEMORY_AGENT_MAX_REPLY_TOKENS.",
    )
    keep_chat: bool = _setting(
        True,
        "False for a run whose thread is not kept (LangGraph Server's stateless run, whose thread it deletes when "
        "the run ends): no chat record and no index rows are written for that thread; what the run teaches memory "
        "stays. Set by the server for its runs.",
    )
    tools: bool = field(
        default_factory=lambda: _env("MEMORY_AGENT_TOOLS", "on"),  # the word: __post_init__ reads it, or refuses it
        metadata={
            "env": "MEMORY_AGENT_TOOLS",
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
        # Studio and JSON callers may send numbers as strings, and any JSON type for any setting.
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("str", str) and not isinstance(value, str):
                # 5 as system_prompt failed the run with "'int' object has no attribute 'strip'", and as
                # rag_collection reached the knowledge search's SQL ("An internal error occurred").
                raise ValueError(f"{f.name} must be text (got {value!r:.100})")
            if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
                try:  # "2" from a form, 3.0 from JSON; "x", 2.5 and null are no whole number
                    whole = int(value) if isinstance(value, str) or (isinstance(value, float) and value.is_integer()) else None
                except ValueError:  # "invalid literal for int()" named no setting
                    whole = None
                if whole is None:
                    raise ValueError(f"{f.name} must be a whole number (got {value!r})")
                setattr(self, f.name, whole)
            least = _LEAST.get(f.name, 0)  # one rule, said once: tail_size -1 was told "0 or more", then 0 "at least 1"
            if f.type in ("int", int) and getattr(self, f.name) < least:
                said = f"at least {least}" if least else "0 or more"
                raise ValueError(f"{f.name} must be {said} (got {getattr(self, f.name):,}){_WHY_LEAST.get(f.name, '')}")
            if f.type in ("bool", bool) and isinstance(getattr(self, f.name), str):
                word = getattr(self, f.name).strip().casefold()
                if word not in _ON | _OFF:  # "disable" was taken as on
                    raise ValueError(f"{f.name} must be on or off (got {getattr(self, f.name)!r})")
                setattr(self, f.name, word in _ON)
        for name, ceiling in SAFETY_CEILINGS.items():
            value = getattr(self, name)
            if not 0 <= value <= ceiling:
                raise ValueError(f"{name} must be between 0 and {ceiling:,} (got {value:,})")
        if self.summary_window < self.tail_size:
            raise ValueError("summary_window must be at least tail_size")
        self.rag_collection = self.rag_collection.strip()  # as ingest names it: "handbook " found nothing
        self.reply_rules = self.reply_rules.strip().casefold()
        if self.reply_rules not in REPLY_RULES:
            raise ValueError(f"reply_rules must be one of {', '.join(REPLY_RULES)} (got {self.reply_rules!r})")


def environment_context() -> Context:
    """The Context this process' environment gives (what the CLI, serve and the evals run with).
    A value Context refuses is a SettingError naming the variable that set it."""
    try:
        return Context()
    except SettingError:
        raise
    except ValueError as exc:
        for f in fields(Context):
            env = f.metadata.get("env")
            if env and str(exc).startswith(f"{f.name} "):
                raise SettingError(f"{env}={os.environ.get(env)!r}: {exc}") from None
        raise


ALLOWED_MODELS_ENV = "MEMORY_AGENT_ALLOWED_MODELS"


def allowed_models() -> list[str]:
    """The chat models a client of the server may pick (``Context.model``): the comma-separated
    ``MEMORY_AGENT_ALLOWED_MODELS``, by default the server's own model and ``offline``."""
    configured = [m.strip() for m in os.environ.get(ALLOWED_MODELS_ENV, "").split(",") if m.strip()]
    return list(dict.fromkeys(configured or [Context().model, "offline"]))


def server_safety_settings() -> dict[str, int]:
    """The server's own values of the safety settings (the defaults, from the environment where noted)."""
    defaults = Context()
    return {name: getattr(defaults, name) for name in SAFETY_CEILINGS}


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
