"""The graph's state: the full history plus what each node contributed to the turn.

Only JSON-friendly values live here (dicts, lists, strings), so checkpoints stay
readable in Studio and psql and deserialize without a type allow-list. The shapes of what
recall and retrieval put here are TypedDicts (``core.contracts``): plain dicts at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Callable, Sequence

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage, convert_to_messages
from langgraph.channels.binop import BinaryOperatorAggregate, _get_overwrite
from langgraph.graph import add_messages
from langgraph.types import Overwrite
from pydantic import NonNegativeInt, TypeAdapter, ValidationError

from core.contracts import Chunk, LoadedContext
from core.schemas import SummaryBoard
from core.text_validation import made_storable, made_storable_value, unstorable_reason

LAST_NODE = "extract_memories"
"""The graph's last node, which graph/assembly.py ends the memory phase with. Here because memory/
(below the assembly) writes states as if it had just run: ``update_state(..., as_node=LAST_NODE)``
leaves nothing pending, as a finished turn does."""


UNSTORABLE = "unstorable"
"""A message's ``additional_kwargs`` key: why its text was made storable as it came in (a NUL, a lone
surrogate, and where). load_context refuses the turn's own message with it, as the message routes
refuse such text; an older message written so (a state editor's) stays, readable."""


def _storable_calls(message: BaseMessage) -> dict[str, Any]:
    """The fields of a message that name tool calls, made storable, where any needed it: a model's
    broken escape (a lone surrogate) in a call's arguments, name or id made the next request to the
    model unsendable, and the turn failed. The same replacement in a call and in its result's
    ``tool_call_id`` keeps them paired."""
    fields = {}
    if isinstance(message, AIMessage):
        for name in ("tool_calls", "invalid_tool_calls"):
            calls = getattr(message, name)
            if calls and (storable := made_storable_value(calls)) is not calls:
                fields[name] = storable
        raw = message.additional_kwargs.get("tool_calls")  # as a provider sent them (sent again when tool_calls are empty)
        if raw and (storable := made_storable_value(raw)) is not raw:
            fields["additional_kwargs"] = {**message.additional_kwargs, "tool_calls": storable}
    elif isinstance(message, ToolMessage):
        for name in ("tool_call_id", "name"):
            value = getattr(message, name)
            if isinstance(value, str) and (storable := made_storable(value)) is not value:
                fields[name] = storable
    return fields


def _storable_message(message: BaseMessage) -> BaseMessage:
    if calls := _storable_calls(message):
        message = message.model_copy(update=calls)
    content = made_storable_value(message.content)
    if content == message.content:
        if UNSTORABLE in message.additional_kwargs:  # kept since, and sent again (a regenerate): nothing is replaced now
            kept = {k: v for k, v in message.additional_kwargs.items() if k != UNSTORABLE}
            return message.model_copy(update={"additional_kwargs": kept})
        return message
    why = {UNSTORABLE: unstorable_reason(message.text) or "held text that cannot be stored"}
    return message.model_copy(update={"content": content, "additional_kwargs": {**message.additional_kwargs, **why}})


def add_storable_messages(left: Any, right: Any) -> Any:
    """``add_messages``, with what Postgres cannot store (a NUL, a lone surrogate) replaced in the
    messages coming in: the message routes refuse such text, but a state write (Studio's state
    editor), a model or a tool can bring it, and a chat's record or index row of it would then fail
    on every later turn. (An ``Overwrite`` of the channel skips every reducer, this one too: the
    storage layer makes what it derives storable all the same, storage.memory_store and storage.episodes.)"""
    incoming = right if isinstance(right, list) else [right]
    return add_messages(left, [_storable_message(m) for m in convert_to_messages(incoming)])


def storable_value(left: Any, right: Any) -> Any:
    """The newest value (as a channel without a reducer keeps), with its text made storable (above)."""
    return made_storable_value(right)


def _refusal(channel: str, expected: str, written: Any, exc: ValidationError) -> ValueError:
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the value'}: {e['msg']}" for e in exc.errors()[:5])
    return ValueError(f"{channel} must be {expected}, not {type(written).__name__} {str(written)[:80]!r}: {problems}")


def storable_summary(left: Any, right: Any) -> Any:
    """The summary channel's reducer: :func:`storable_value` of a value that reads as a SummaryBoard.

    Nodes write a board's dict, but a state write (Studio's state editor, ``update_state``) may bring
    any JSON: a string or a list saved here failed every later turn of the thread, and the chat API's
    read of it, with "Input should be a valid dictionary or instance of SummaryBoard". Such a write is
    refused now (a ValueError: LangGraph Server answers 400 with its message), naming the channel.
    A board past SUMMARY_CHARS is kept cut to it, as every board made is."""
    value = storable_value(left, right)  # a NUL in an edited board is replaced, as in a message, not refused
    if value:  # {} and None are "no summary yet", as every reader takes them
        try:
            board = SummaryBoard.model_validate(value)
        except ValidationError as exc:
            expected = "a summary board (an object with summary, key_facts, entities, topics, action_items and pending_questions)"
            raise _refusal("summary", expected, right, exc) from None
        if any(getattr(board, name) != value.get(name, getattr(board, name)) for name in SummaryBoard.model_fields):
            return {**value, **board.model_dump(mode="json")}  # cut to SUMMARY_CHARS (SummaryBoard._bounded)
    return value


class CheckedValue(BinaryOperatorAggregate):
    """A channel that keeps its newest value, passed through its reducer (:func:`checked`'s) on every
    write. As LangGraph's BinaryOperatorAggregate, but one whose type cannot be made empty (``str |
    None``) holds None before its first write rather than nothing: a write to a channel holding
    nothing is kept as it comes, past the reducer (a cursor edited to 5 before the first fold was)."""

    def __init__(self, typ: Any, operator: Callable[[Any, Any], Any]):
        super().__init__(typ, operator)
        if not self.is_available():
            self.value = None

    def update(self, values: Sequence[Any]) -> bool:
        # An Overwrite (``Overwrite(v)``, ``{"__overwrite__": v}`` or its JSON-erased form) skips a
        # channel's reducer: its value is checked here too, or {"user_turns": {"__overwrite__": "x"}}
        # wedged the thread as a plain write did. (LangGraph's own reader of the three forms, not a copy.)
        checked_values = []
        for value in values:
            is_overwrite, inner = _get_overwrite(value)
            checked_values.append(Overwrite(self.operator(self.value, inner)) if is_overwrite else value)
        return super().update(checked_values)


@cache  # one channel (and reducer) each: get_type_hints evaluates State's string annotations on every call
def checked(channel: str, typ: Any, expected: str) -> CheckedValue:
    """The channel of a state value of type ``typ``: its newest value, with its text made storable (as
    :func:`storable_value`; the same object when nothing needed it), once it validates as ``typ`` in
    pydantic's strict mode (an int is an int, not True, 2.0 or "3"). It is kept as written, never coerced
    or trimmed of keys ``typ`` does not name.

    Nodes write these shapes, but a state write (Studio's state editor, ``update_state``, LangGraph
    Server's ``POST /threads/{id}/state``) may bring any JSON: ``{"user_turns": "x"}`` saved failed the
    next turn in load_context and left the thread waiting there. Such a write is refused (a ValueError,
    which the server answers with 400) naming the channel and ``expected``, and the thread keeps its
    value. An ``Overwrite`` of the channel is checked the same (:class:`CheckedValue`)."""
    validate = TypeAdapter(typ).validate_python

    def reduce(left: Any, right: Any) -> Any:
        value = made_storable_value(right)
        try:
            validate(value, strict=True)
        except ValidationError as exc:
            raise _refusal(channel, expected, right, exc) from None
        return value

    reduce.__name__ = reduce.__qualname__ = f"checked_{channel}"
    return CheckedValue(typ, reduce)


COUNT = "a whole number, 0 or more"
SUMMARY_CHANNEL = CheckedValue(dict, storable_summary)  # one instance: channels compare by their reducer


@dataclass(kw_only=True)
class InputState:
    """What a caller sends: new messages. ``messages`` keeps the *full* history (Studio chat mode)."""

    messages: Annotated[Sequence[AnyMessage], add_storable_messages] = field(default_factory=list)


@dataclass(kw_only=True)
class State(InputState):
    # Active conversation memory: the model sees summary + messages after the cursor.
    summary: Annotated[dict[str, Any], SUMMARY_CHANNEL] = field(default_factory=dict)
    """The running SummaryBoard (as a dict); empty until the first fold."""
    summarized_through: Annotated[str | None, checked("summarized_through", str | None, "a message id or null")] = None
    """Id of the last message the summary covers (the compaction cursor)."""
    summary_folds: Annotated[int, checked("summary_folds", NonNegativeInt, COUNT)] = 0
    """How many folds built the summary (each one incremental)."""

    # What each node put into this turn, shown in Studio's state view.
    loaded_context: Annotated[LoadedContext, checked("loaded_context", LoadedContext, "what load_context finds (profile, preferences, facts, tasks, ...)")] = field(default_factory=dict)
    """load_context: profile, preferences, ranked facts, open tasks, related chats, excerpts."""
    retrieved_chunks: Annotated[list[Chunk], checked("retrieved_chunks", list[Chunk], "a list of knowledge-base chunks as retrieve keeps them")] = field(default_factory=list)
    """retrieve: knowledge-base chunks with source, chunk index and scores."""
    memory_written: Annotated[dict[str, Any], checked("memory_written", dict[str, Any], "an object")] = field(default_factory=dict)
    """extract_memories: facts, preferences, profile fields and tasks written this turn."""
    turn_usage: Annotated[dict[str, Any], checked("turn_usage", dict[str, Any], "an object")] = field(default_factory=dict)
    """reply: prompt sections' token counts, tokens in/out, model name."""

    error: Annotated[str | None, checked("error", str | None, "text or null")] = None
    """Why this turn was refused (the refused message is removed again); None when it ran."""

    user_turns: Annotated[int, checked("user_turns", NonNegativeInt, COUNT)] = 0
    """User turns seen on this thread (drives extract_every_n_turns)."""
    tool_steps: Annotated[int, checked("tool_steps", NonNegativeInt, COUNT)] = 0
    """Model→tool round trips in the current reply (bounded by max_tool_steps)."""
