"""Tool calls that a model wrote as text instead of in ``tool_calls``.

Small local models behind OpenAI-compatible servers (llama-cpp-python, Qwen2.5 0.5B/1.5B)
answer an auto tool choice with the call in ``content``: a bare JSON object, a fenced
json block, or Qwen's ``<tool_call>{...}</tool_call>``. A call that names a bound tool
with valid arguments is made into that call; anything else that looks like a call is
never shown to the user as the reply (the reply node asks for a plain answer instead),
and :class:`CallTextFilter` keeps such text out of the token stream.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError

from core.messages import no_answer_note
from llm.chat_model import with_temperature
from prompts.reply_prompt import found_apart
from llm.reply_checks import NUDGES, WRAPPER_KEYS, EchoHold, MarkupFilter, Said, echo_kind, echo_targets, no_answer_text, unwrap_json_reply, without_markup

__all__ = [
    "CallTextFilter",
    "NO_TOOLS_INSTRUCTION",
    "TextCalls",
    "answer_again",
    "answer_in_plain_words",
    "find_text_calls",
    "with_text_calls_resolved",
]

# Qwen's <tool_call>; <tools> is a small model echoing the tool list of its prompt (never for the user).
_TAGGED = re.compile(r"<(tool_call|tools|function_call)>\s*(.*?)\s*(?:</\1>|$)", re.S)
_FENCED = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)
_ARG_KEYS = ("arguments", "parameters", "args", "input", "tool_input")
_FUNCTION_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
_CALL_KEYS = {"name", "id", "type", "tool", "function", *_ARG_KEYS}
NO_TOOLS_INSTRUCTION = (
    "Answer the user directly in plain words. Do not write tool calls, JSON or function names: "
    "no tools are available for this answer."
)


@dataclass
class TextCalls:
    """What a reply's text holds: calls (name, arguments) and the prose around them."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    prose: str = ""

    @property
    def found(self) -> bool:
        return bool(self.calls)


def _call_of(obj: Any) -> tuple[str, Any] | None:
    """(name, arguments) when ``obj`` is shaped like a call, else None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {"name", "arguments"}}
        inner = obj["function"]
        name = inner.get("name")
        # A tool definition echoed back ({"name", "description", "parameters"}) counts as a call too: never shown.
        return (name, _arguments(inner)) if isinstance(name, str) and name else None
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name or not set(obj) <= _CALL_KEYS:
        return None
    if not any(k in obj for k in _ARG_KEYS) and not _FUNCTION_NAME.fullmatch(name):
        return None  # {"name": "Dana"} is data; {"name": "recall_context"} is a call without arguments
    return name, _arguments(obj)


def _arguments(obj: dict) -> Any:
    args = next((obj[k] for k in _ARG_KEYS if k in obj), {})
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args  # left a string: invalid arguments, still a call-shaped text
    return args


def _calls_in_json(text: str) -> list[tuple[str, Any]] | None:
    """The calls of a JSON object or array of objects that are all call-shaped, else None."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    items = data if isinstance(data, list) else [data]
    calls = [_call_of(i) for i in items]
    if not items or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


_LOOSE_CALL = re.compile(
    r'\{\s*"(?:name|tool)"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters|args|input)"\s*:|"function"\s*:\s*\{\s*"name"\s*:'
    # or a tool's snake_case name opening a broken object: the 0.5B wrote '{"name": "recall_context", "{"name": …'
    # and '{"name": "recall_context", "' (27 Nov 2026); a valid call was taken before this is looked for
    r'|\{\s*"(?:name|tool)"\s*:\s*"[a-z]+(?:_[a-z0-9]+)+"\s*,'
    # or a call cut before its name was whole, ending the text: the 0.5B's add_task and update_task calls,
    # then '{"name": "' at the reply cap (3 Dec 2026), which was shown and stored as the reply
    r'|\{\s*"(?:name|tool)"\s*:\s*"[a-z0-9_]*"?\s*$'
)
_JSON_START = re.compile(r"\{\s*\"|\[\s*\{")


def _bare_calls(text: str) -> tuple[list[tuple[str, Any]], str]:
    """Call-shaped JSON values anywhere in ``text`` (not fenced or tagged), and the text without them."""
    calls: list[tuple[str, Any]] = []
    prose, i = "", 0
    decoder = json.JSONDecoder()
    while (m := _JSON_START.search(text, i)) is not None:
        try:
            value, end = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            prose += text[i : m.start() + 1]
            i = m.start() + 1
            continue
        found = _calls_in_json(json.dumps(value))
        prose += text[i : m.start()] if found else text[i:end]
        calls += found or []
        i = end
    return calls, prose + text[i:]


def find_text_calls(text: str) -> TextCalls:
    """The calls written in ``text``: ``<tool_call>`` blocks, fenced blocks, and bare JSON call objects."""
    if not text or not text.strip():
        return TextCalls(prose=text or "")
    calls: list[tuple[str, Any]] = []
    for m in _TAGGED.finditer(text):
        # A tagged block is a call whatever its body; a broken body counts as an invalid call.
        calls += _calls_in_json(m.group(2)) or [("", m.group(2))]
    prose = _TAGGED.sub("", text)
    for m in _FENCED.finditer(prose):
        found = _calls_in_json(m.group(1).strip())
        if found:
            calls += found
            prose = prose.replace(m.group(0), "")
    bare, prose = _bare_calls(prose)
    calls += bare
    if loose := _LOOSE_CALL.search(prose):
        # JSON that still reads as a call but is not one (cut at the output cap, stray keys, bad escapes,
        # maybe after valid calls): an invalid call, and everything after it goes with it.
        calls.append(("", prose[loose.start() :]))
        prose = prose[: loose.start()]
    return TextCalls(calls, prose.strip() if calls else text)


def _copies_the_definition(tool: BaseTool, args: dict) -> bool:
    """An argument that is the tool's own description, word for word: a small model copying its prompt
    (the 0.5B answered "Hi! My name is Dana…" with add_task("Add a task to the user's task list…"))."""
    own = {(tool.description or "").strip().casefold()} - {""}
    return any(isinstance(v, str) and v.strip().casefold() in own for v in args.values())


def _valid_args(tool: BaseTool, args: Any) -> dict | None:
    """``args`` when they validate against the tool's call schema (what the model may fill in)."""
    if not isinstance(args, dict) or _copies_the_definition(tool, args):
        return None
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(args)
        except ValidationError:
            return None
        return args
    return args if isinstance(schema, dict) else None


def with_text_calls_resolved(message: AIMessage, tools: list[BaseTool]) -> tuple[AIMessage, bool]:
    """``message`` with calls written as text made real; and whether a plain answer is still needed.

    Returns (message, True) when the text looks like a call but names no bound tool or
    has invalid arguments: the caller must not show it and asks for a plain answer.
    """
    if message.tool_calls:
        return with_call_ids(message), False
    found = find_text_calls(message.text)
    if not found.found:
        return message, False
    by_name = {t.name: t for t in tools}
    resolved = []
    for name, args in found.calls:
        tool = by_name.get(name)
        valid = _valid_args(tool, args) if tool is not None else None
        if valid is None:
            return message.model_copy(update={"content": found.prose}), True
        resolved.append({"name": name, "args": valid, "id": new_call_id(), "type": "tool_call"})
    return AIMessage(
        content=found.prose,
        tool_calls=resolved,
        id=message.id,
        usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata,
    ), False


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


def with_call_ids(message: AIMessage) -> AIMessage:
    """``message`` with an id for each tool call the server sent without one (some OpenAI-compatible
    servers leave a streamed call's id out): a call's result names the call by its id, and without
    one the tool node could not answer it and the turn failed."""
    if all(call.get("id") for call in message.tool_calls):
        return message
    calls = [call if call.get("id") else {**call, "id": new_call_id()} for call in message.tool_calls]
    return message.model_copy(update={"tool_calls": calls})


def with_instruction(messages: list[BaseMessage], instruction: str) -> list[BaseMessage]:
    # In the leading system message: local chat templates reject a system message after the first turn.
    if messages and isinstance(messages[0], SystemMessage) and isinstance(messages[0].content, str):
        return [SystemMessage(f"{messages[0].content}\n\n{instruction}"), *messages[1:]]
    return [SystemMessage(instruction), *messages]


# What one tool result may add to the plain-words retry's instruction.
LOOKUP_CHARS = 1500


def without_tool_steps(messages: list[BaseMessage]) -> tuple[list[BaseMessage], list[str]]:
    """The messages up to the newest user message, and this turn's tool results as text: small
    models (the 0.5B) answer nothing at all after a tool result, every time, but do answer the
    same question with the results stated in the instructions."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=len(messages) - 1)
    results = [f"- {m.name or 'tool'}: {m.text[:LOOKUP_CHARS]}" for m in messages[last + 1 :] if isinstance(m, ToolMessage) and m.text.strip()]
    return list(messages[: last + 1]), results


def found_in_instructions(messages: list[BaseMessage]) -> tuple[list[BaseMessage], str]:
    """The newest user message as the user wrote it, and what memory found for it, to go with the
    instructions: the 0.5B, given memory's sections above a message, copied the message back (every
    time, at temperature 0), but answers the same message alone under the same sections as instructions."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
    if last is None:
        return messages, ""
    found, words = found_apart(messages[last])
    if not found:
        return messages, ""
    return [*messages[:last], HumanMessage(words, id=messages[last].id), *messages[last + 1 :]], found


async def answer_in_plain_words(model: BaseChatModel, messages: list[BaseMessage], failed: AIMessage) -> AIMessage:
    """Ask once more, without tools (and without this turn's tool steps, their results told in the
    instructions), for a plain answer; an empty or call-shaped text again gives a note saying so."""
    again, usage = await _ask_again(model, messages, failed, NO_TOOLS_INSTRUCTION)
    if find_text_calls(again.text).found or not again.text.strip():
        plain, _ = without_tool_steps(messages)
        return no_answer_note(no_answer_text("unusable", echo_targets(plain).user_text), id=again.id, usage_metadata=usage)
    return again.model_copy(update={"usage_metadata": usage})


# The second asking after an echo or a repeat samples: at temperature 0 the 0.5B gave the same words
# again under the nudge (2 of 3 replays on Dana's lines answered anew at 0.8; docs/local-model.md).
RETRY_TEMPERATURE = 0.8


async def answer_again(model: BaseChatModel, messages: list[BaseMessage], failed: AIMessage, kind: str) -> AIMessage:
    """Ask once more, without tools, with a nudge (``llm.reply_checks.NUDGES[kind]``) and sampling
    (``RETRY_TEMPERATURE``), after a reply that only echoed the user's message ("echo") or repeated
    the previous reply ("repeat"); a second such answer, an empty one or a call written as text
    becomes a note saying so."""
    again, usage = await _ask_again(with_temperature(model, RETRY_TEMPERATURE), messages, failed, NUDGES[kind])
    plain, _ = without_tool_steps(messages)
    said = echo_targets(plain)
    if not again.text.strip() or find_text_calls(again.text).found or echo_kind(again.text, said):
        return no_answer_note(no_answer_text(kind, said.user_text), id=again.id, usage_metadata=usage)
    return again.model_copy(update={"usage_metadata": usage})


async def _ask_again(model: BaseChatModel, messages: list[BaseMessage], failed: AIMessage, instruction: str) -> tuple[AIMessage, dict | None]:
    """The model's answer (its markup stripped) to the messages up to the user's newest, the
    instruction and this turn's lookups in the system message; and both calls' usage summed."""
    plain, results = without_tool_steps(messages)
    if results:
        instruction += "\n\nWhat your lookups for this message returned:\n" + "\n".join(results)
    plain, found = found_in_instructions(plain)
    if found:
        instruction = f"{found}\n\n{instruction}"
    again = without_markup(await model.ainvoke(with_instruction(plain, instruction)))
    return again, summed_usage(failed, again)


def summed_usage(a: AIMessage, b: AIMessage) -> dict | None:
    ua, ub = a.usage_metadata or {}, b.usage_metadata or {}
    if not ua and not ub:
        return None
    keys = ("input_tokens", "output_tokens", "total_tokens")
    return {k: int(ua.get(k, 0) or 0) + int(ub.get(k, 0) or 0) for k in keys}  # type: ignore[return-value]


# --------------------------------------------------------------------------- streaming
_OPENER = re.compile(r"<(?:tool_call|tools|function_call)>|```|\{\s*\"|\[\s*\{")
_PARTIAL_OPENER = re.compile(r"(?:<[a-z_]{0,13}|`{1,2}|\{\s*|\[\s*)$")


class CallTextFilter:
    """Streamed reply text with call-shaped parts held back and dropped.

    Feed it each chunk with its message id; it returns what may be shown now. A part that
    could be a call (a ``<tool_call>`` block, a fenced block, a JSON object) is held until
    it is complete, then dropped if it is a call and shown if it is not (a JSON example the
    user asked for still appears, only a moment later). Template and tool markup is taken out
    as the stored reply's is (:class:`llm.reply_checks.MarkupFilter`). ``finish()`` ends the message.
    """

    def __init__(self) -> None:
        self._id: str | None = None
        self._held = ""
        self._shown = False  # some of the current message was released
        self._markup = MarkupFilter()  # then template and tool markup (llm.reply_checks) goes too,
        self._echo = EchoHold()  # and an echo the reply node will ask again for

    def expect(self, said: Said | None) -> None:
        """What the coming reply is checked against for echoes (``llm.reply_checks.echo_targets``)."""
        self._echo.expect(said)

    def feed(self, message_id: str | None, text: str) -> str:
        out = ""
        if message_id != self._id:
            out += self.finish()
            self._id = message_id
        self._held += text
        released = self._release()
        self._shown = self._shown or bool(released.strip())
        return out + self._echo.feed(self._markup.feed(released))

    def finish(self) -> str:
        """End the current message: release held text unless it holds a call."""
        held, self._held, self._shown = self._held, "", False
        found = find_text_calls(held) if held else None
        text = found.prose if found is not None and found.found else unwrap_json_reply(held)
        return self._echo.feed(self._markup.feed(text) + self._markup.finish()) + self._echo.finish()

    def _release(self) -> str:
        out = ""
        while self._held:
            text = self._held
            m = _OPENER.search(text)
            if m is None:
                partial = _PARTIAL_OPENER.search(text)
                cut = partial.start() if partial else len(text)
                out, self._held = out + text[:cut], text[cut:]
                return out
            out, text = out + text[: m.start()], text[m.start() :]
            if not self._shown and not out.strip() and _may_be_wrapped(text):
                self._held = text  # a reply that opens as JSON may be one wrapped ({"response": …}): decided at its end
                return out
            end = _block_end(text)
            if end is None:
                self._held = text  # the part is still arriving
                return out
            block, self._held = text[:end], text[end:]
            if not find_text_calls(block).found:
                out += block
        return out


_WRAPPER_OPENINGS = tuple(f'{{"{key}":' for key in WRAPPER_KEYS)


def _may_be_wrapped(text: str) -> bool:
    """Whether ``text`` opens, or may still open, as a reply wrapped in JSON ({"response": …})."""
    opening = re.sub(r"\s+", "", text[:40]).lower()
    return any(w.startswith(opening) or opening.startswith(w) for w in _WRAPPER_OPENINGS)


def _block_end(text: str) -> int | None:
    """End of the part ``text`` opens with (a <tool_call>, a fence, JSON), or None while it is open."""
    tag = re.match(r"<(tool_call|tools|function_call)>", text)
    if tag:
        close = text.find(f"</{tag.group(1)}>")
        return None if close < 0 else close + len(tag.group(1)) + 3
    if text.startswith("```"):
        close = text.find("```", 3)
        return None if close < 0 else close + 3
    try:
        return json.JSONDecoder().raw_decode(text)[1]
    except json.JSONDecodeError:
        return None  # incomplete, or not JSON after all: decided when the message ends
