"""One structured model call with validation, one repair attempt, and nothing half-parsed.

Works with models that support structured output natively (OpenAI json_schema or
tool calling, the offline model) and with models that only return text: their reply
is parsed strictly as one JSON object and validated with the pydantic schema.

Servers differ in what they accept. OpenAI, llama.cpp's ``llama-server``, vLLM and
Ollama (0.5+) constrain the reply to the schema given as a ``json_schema`` response
format. llama-cpp-python's server answers HTTP 500 to that, but turns
``{"type": "json_object", "schema": ...}`` into a grammar (``json_object_schema`` here),
so even a 0.5B model can only write JSON of the schema; some servers ignore a forced
tool. When a server refuses a mode the call falls back along
json_schema -> json_object_schema -> function_calling -> json_mode -> text, and what a
server refused and took is kept per model and base URL (``llm.server_modes``: for the process,
and in a cache file when the CLI asks), so a refused mode is sent once, not in every process.
Every call is capped (``max_tokens`` sized to the schema), so a model that loops
stops early instead of filling its context.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ValidationError

from core.errors import ModelOutputError, SettingError
from llm.chat_model import model_label, server_of, with_output_cap
from llm import server_modes
from llm.shape_repair import coerce_shapes, kept_valid_parts

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

METHODS = ("auto", "json_schema", "json_object_schema", "function_calling", "json_mode", "text")
# The order a refused mode falls back in; "auto" is the model's own default (json_schema for OpenAI).
# The schema-constrained modes come first: a grammar makes even a small model's JSON valid.
FALLBACK_ORDER = ("auto", "json_schema", "json_object_schema", "function_calling", "json_mode", "text")
DEFAULT_OUTPUT_TOKENS = 1024


@dataclass
class StructuredResult(Generic[T]):
    value: T
    attempts: int
    method: str
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    errors: list[str] = field(default_factory=list)


def configured_method() -> str:
    method = os.environ.get("MEMORY_AGENT_STRUCTURED_OUTPUT", "auto")
    if method not in METHODS:
        raise SettingError(f"MEMORY_AGENT_STRUCTURED_OUTPUT must be one of {', '.join(METHODS)}, not {method!r}")
    return method


def output_cap(schema: type[BaseModel]) -> int:
    """Most tokens a structured reply of ``schema`` may take: the schema's own size."""
    return int(getattr(schema, "max_output_tokens", DEFAULT_OUTPUT_TOKENS))


# --------------------------------------------------------------------------- the mode each server takes
def _server_key(model: BaseChatModel) -> tuple[str, str | None]:
    return model_label(model), server_of(model)


def remembered_mode(model: BaseChatModel) -> str | None:
    """The mode refusals moved this model and server to (where a call in "auto" starts); None: no refusal seen."""
    if not server_modes.any_refused(_server_key(model)):
        return None
    return _start_mode(model, "auto")


def forget_modes() -> None:
    """Forget what servers refused and took (tests; a restarted server may accept more)."""
    server_modes.forget()


def _remember(model: BaseChatModel, refused: str, mode: str, reason: str) -> None:
    if not server_modes.learn(_server_key(model), refused, refused=reason):
        return
    # Once per model and server (and, with the CLI's cache file, once for good): a log line, not a chat line.
    kept = server_modes.kept_in()
    log.warning(
        "Model %s at %s refused structured output mode %s (%s); using %s from now on%s.",
        model_label(model), server_of(model) or "its default endpoint", refused, reason[:200], mode,
        f" (kept in {kept})" if kept else " in this process",
    )


def _start_mode(model: BaseChatModel, method: str) -> str:
    key, mode = _server_key(model), method
    while mode != "text" and server_modes.is_refused(key, mode):
        mode = _next_mode(mode)
    return mode


def _talks_http(model: BaseChatModel) -> bool:
    """An OpenAI-compatible client (through a forwarding wrapper too): the only kind a server can refuse."""
    inner = getattr(model, "inner", None)
    if isinstance(inner, BaseChatModel):
        return _talks_http(inner)
    return hasattr(getattr(model, "root_async_client", None), "with_options")


def _without_retries(model: BaseChatModel) -> BaseChatModel:
    """The same model, its client not retrying: how a mode this server was never seen to take is tried.

    A refusal is an HTTP 500 from llama-cpp-python, which the openai SDK retries twice: the same
    refused request three times. Another failure of such a try is sent again with the retries.
    """
    inner = getattr(model, "inner", None)
    if isinstance(inner, BaseChatModel):
        return model.model_copy(update={"inner": _without_retries(inner)})
    client = getattr(model, "root_async_client", None)
    if not hasattr(client, "with_options"):
        return model
    once = client.with_options(max_retries=0)
    return model.model_copy(update={"root_async_client": once, "async_client": once.chat.completions})


def _next_mode(mode: str) -> str:
    # "auto" and "json_schema" are the same request for OpenAI-compatible servers: skip the twin.
    after = "json_schema" if mode == "auto" else mode
    return FALLBACK_ORDER[FALLBACK_ORDER.index(after) + 1]


class ModeRefused(Exception):
    """The server refused this structured-output mode (not the model's answer being wrong)."""


def _refusal_reason(exc: Exception, mode: str) -> str | None:
    """Why ``exc`` means the server refuses ``mode``, or None when it is another failure.

    An HTTP error whose message names the request field of the mode (llama-cpp-python:
    500 with a validation error on ``response_format``; others 400/422). An overloaded
    or broken server says nothing about response_format and is not a refusal.
    """
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or status < 400:
        return None
    text = str(exc).casefold()
    words = ("tool_choice", "tools", "function") if mode == "function_calling" else ("response_format", "json_schema", "json_object")
    if any(w in text for w in words):
        return f"HTTP {status}: {str(exc)}"
    return None


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def parse_json_strict(text: str, schema: type[T]) -> T:
    """Exactly one JSON object (optionally in a ```json fence), validated by ``schema``."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body.startswith("{"):
        raise ValueError("the reply is not a JSON object")
    data = json.loads(body)  # raises on trailing text: strict by design
    return schema.model_validate(data)


def _json_instruction(schema: type[BaseModel]) -> str:
    return (
        "Reply with only one JSON object, no prose and no code fence, that validates against this JSON schema:\n"
        + json.dumps(schema.model_json_schema(), ensure_ascii=False)
    )


# With the schema enforced by the server's grammar the model needs no 800-token schema in its
# prompt (the prompt names the fields); a server that ignores ``schema`` gets it in the repair.
_CONSTRAINED_INSTRUCTION = "Reply with one JSON object only."


def constrained_format(schema: type[BaseModel]) -> dict:
    """The response format llama-cpp-python turns into a grammar: JSON of exactly ``schema``."""
    return {"type": "json_object", "schema": schema.model_json_schema()}


def _with_instruction(messages: list[BaseMessage], instruction: str) -> list[BaseMessage]:
    """The messages with ``instruction`` added to the leading system message.

    Not as a trailing system message: the local servers text mode is for (Ollama, vLLM,
    llama.cpp) render chat templates that reject a system message after the first turn.
    """
    if messages and isinstance(messages[0], SystemMessage) and isinstance(messages[0].content, str):
        return [SystemMessage(f"{messages[0].content}\n\n{instruction}"), *messages[1:]]
    return [SystemMessage(instruction), *messages]


def _usage(message: BaseMessage | None) -> tuple[int, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0) or 0), int(meta.get("output_tokens", 0) or 0)


def _raw_from_error(exc: Exception) -> AIMessage | None:
    """The model's text when a client parsed it itself and raised (pydantic keeps the input)."""
    if isinstance(exc, ValidationError):
        for err in exc.errors():
            if not err.get("loc") and isinstance(err.get("input"), str):  # the whole reply, not a field
                return AIMessage(err["input"])
    completion = getattr(exc, "completion", None)  # openai's LengthFinishReasonError keeps the cut reply
    choices = getattr(completion, "choices", None) or []
    if choices:
        return AIMessage(getattr(choices[0].message, "content", None) or "")
    return None


def _is_cut_at_cap(exc: Exception) -> bool:
    return type(exc).__name__ == "LengthFinishReasonError"


def _raw_text(raw: BaseMessage | None) -> str:
    if raw is None:
        return ""
    tool_calls = getattr(raw, "tool_calls", None)
    if tool_calls:
        return json.dumps(tool_calls[0].get("args", {}), ensure_ascii=False)
    broken = getattr(raw, "invalid_tool_calls", None)
    if broken and isinstance(broken[0].get("args"), str) and not _text_of(raw).strip():
        return broken[0]["args"]  # a forced call whose arguments are not JSON (cut at the cap): what the model wrote
    return _text_of(raw)


def _text_of(raw: BaseMessage) -> str:
    content = raw.content
    if isinstance(content, list):
        return "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return str(content)


def _was_cut(raw: BaseMessage | None) -> bool:
    return (getattr(raw, "response_metadata", None) or {}).get("finish_reason") == "length"


def _complete_prefix(text: str) -> Any:
    """The JSON value of ``text`` cut short, up to its last complete item, with its open brackets closed.

    A small model that loops on a list ("Rome", "Rome", ...) is stopped by the output cap mid-item;
    everything before that item is still what it meant. None when no cut point parses.
    """
    body = text.strip()
    if not body.startswith("{"):
        return None
    for cut, closers in reversed(_cut_points(body)):
        try:
            return json.loads(body[:cut] + closers)
        except ValueError:
            continue
    return None


def _cut_points(body: str) -> list[tuple[int, str]]:
    """Each comma outside JSON strings (the items before it are complete), with the brackets that
    close what is open there; one pass, so a long cut reply is not rescanned per comma."""
    points: list[tuple[int, str]] = []
    stack: list[str] = []
    in_string = escaped = False
    for i, ch in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack:  # more closed than opened: nothing after this can be closed
                break
            stack.pop()
        elif ch == ",":
            points.append((i, "".join(reversed(stack))))
    return points


def _without_repeats(value: Any) -> Any:
    """Lists with repeated items (a looping model) keep the first of each."""
    if isinstance(value, dict):
        return {k: _without_repeats(v) for k, v in value.items()}
    if isinstance(value, list):
        seen, out = set(), []
        for item in value:
            key = json.dumps(item, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                out.append(_without_repeats(item))
        return out
    return value


def _salvaged(raw: BaseMessage | None, schema: type[T]) -> T | None:
    """A reply cut at the output cap, kept up to its last complete item when that validates (repeats dropped)."""
    if not _was_cut(raw):
        return None
    data = _complete_prefix(_body_text(_raw_text(raw)))
    if data is None:
        return None
    try:
        return schema.model_validate(coerce_shapes(_without_repeats(data), schema))
    except (ValueError, ValidationError):
        return None


def _non_streaming(model: BaseChatModel) -> BaseChatModel:
    """The same model with streaming off for this call.

    Under ``stream_mode="messages"`` every model call streams, even the hidden (nostream)
    ones; a streamed structured reply is parsed piecewise by the openai SDK, which raises
    on invalid JSON without the text, so the repair could not show the model its output.
    """
    if isinstance(model, BaseChatModel) and model.disable_streaming is not True:
        return model.model_copy(update={"disable_streaming": True})
    return model


def _body_text(text: str) -> str:
    body = text.strip()
    fenced = _FENCE.match(body)
    return fenced.group(1) if fenced else body


def _valid_parts(raw: BaseMessage | None, schema: type[T], result: StructuredResult) -> T | None:
    """The reply's valid parts (``llm.shape_repair.kept_valid_parts``), what was dropped said in ``result.errors``."""
    body = _body_text(_raw_text(raw))
    if not body.startswith("{"):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    kept, dropped = kept_valid_parts(data, schema)
    if kept is not None:
        result.errors.append(f"kept the reply's valid parts; dropped: {', '.join(dropped)[:300]}")
    return kept  # type: ignore[return-value]


def _coerced(raw: BaseMessage | None, schema: type[T]) -> T | None:
    """The reply validated after fixing unambiguous shape slips, or None (its JSON is framed strictly too)."""
    body = _body_text(_raw_text(raw))
    if not body.startswith("{"):
        return None
    try:
        return schema.model_validate(coerce_shapes(json.loads(body), schema))
    except (ValueError, ValidationError):
        return None


async def _text_mode(
    model: BaseChatModel, schema: type[T], messages: list[BaseMessage], config: RunnableConfig | None
) -> tuple[T | None, AIMessage, str | None]:
    raw = await model.ainvoke(_with_instruction(messages, _json_instruction(schema)), config=config)
    try:
        return parse_json_strict(_raw_text(raw), schema), raw, None
    except (ValueError, ValidationError) as exc:
        return None, raw, str(exc)


async def _constrained_mode(
    model: BaseChatModel, schema: type[T], messages: list[BaseMessage], config: RunnableConfig | None
) -> tuple[T | None, BaseMessage | None, str | None]:
    """llama-cpp-python's schema door: ``json_object`` with a ``schema``, the reply parsed here."""
    runnable = model.bind(response_format=constrained_format(schema))
    try:
        raw = await runnable.ainvoke(_with_instruction(messages, _CONSTRAINED_INSTRUCTION), config=config)
    except Exception as exc:
        if _is_cut_at_cap(exc):
            return None, _raw_from_error(exc), "the reply was cut at the output cap"
        reason = _refusal_reason(exc, "json_object_schema")
        if reason:
            raise ModeRefused(reason) from exc
        raise
    try:
        return parse_json_strict(_raw_text(raw), schema), raw, None
    except (ValueError, ValidationError) as exc:
        return None, raw, str(exc)


async def _one_mode(
    model: BaseChatModel, schema: type[T], messages: list[BaseMessage], mode: str, config: RunnableConfig | None
) -> tuple[T | None, BaseMessage | None, str | None]:
    """One call in ``mode``: (parsed, raw, error). Raises ModeRefused when the server refuses the mode."""
    if mode == "text":
        try:
            return await _text_mode(model, schema, messages, config)
        except Exception as exc:
            if _is_cut_at_cap(exc):
                return None, _raw_from_error(exc), "the reply was cut at the output cap"
            raise
    if mode == "json_object_schema":
        return await _constrained_mode(model, schema, messages, config)
    kwargs = {} if mode == "auto" else {"method": mode}
    call_messages = messages
    if mode == "json_mode":
        # JSON mode carries no schema (and OpenAI refuses it unless the prompt says "JSON"): state it.
        call_messages = _with_instruction(messages, _json_instruction(schema))
    runnable = model.with_structured_output(schema, include_raw=True, **kwargs)  # NotImplementedError: text
    try:
        out = await runnable.ainvoke(call_messages, config=config)
    except ValueError as exc:
        # The openai SDK parses json_schema replies itself (also when streaming) and raises
        # before langchain's include_raw fallback sees them: invalid output, so repair it.
        out = {"raw": _raw_from_error(exc), "parsed": None, "parsing_error": exc}
    except Exception as exc:
        if _is_cut_at_cap(exc):
            return None, _raw_from_error(exc), f"the reply was cut at the output cap ({exc})"
        reason = _refusal_reason(exc, mode)
        if reason:
            raise ModeRefused(reason) from exc
        raise
    raw, parsed = out.get("raw"), out.get("parsed")
    err = out.get("parsing_error")
    if parsed is None and err is None and getattr(raw, "invalid_tool_calls", None):
        # The forced call came back with arguments that are not JSON (cut at the cap): the model's output, not a refusal.
        return None, raw, "the call's arguments are not valid JSON" + (" (cut at the output cap)" if _was_cut(raw) else "")
    if parsed is None and err is None and mode == "function_calling" and not getattr(raw, "tool_calls", None):
        # The tool was forced and none came back: the server ignores tool_choice. Its text may still be the answer.
        salvaged = _coerced(raw, schema)
        if salvaged is not None:
            return salvaged, raw, None
        raise ModeRefused("no tool call although one was forced")
    error = str(err) if err else (None if parsed is not None else "the model returned no structured output")
    return parsed, raw, error


async def _repair(
    model: BaseChatModel, schema: type[BaseModel], messages: list[BaseMessage], raw: BaseMessage | None,
    error: str | None, config: RunnableConfig | None, result: StructuredResult,
) -> BaseMessage:
    """One repair call: the model is shown its own output and the validation error, and asked for JSON only."""
    repair = [
        *messages,
        AIMessage(_raw_text(raw) or "(empty reply)"),
        HumanMessage(f"That reply was not valid: {error}\nCorrect it. " + _json_instruction(schema)),
    ]
    try:
        repaired = await model.ainvoke(repair, config=config)
    except Exception as exc:
        if not _is_cut_at_cap(exc):
            raise
        repaired = _raw_from_error(exc) or AIMessage("")
    result.calls += 1
    i, o = _usage(repaired)
    result.input_tokens += i
    result.output_tokens += o
    return repaired


async def invoke_structured(
    model: BaseChatModel,
    schema: type[T],
    messages: list[BaseMessage],
    *,
    method: str | None = None,
    config: RunnableConfig | None = None,
    max_tokens: int | None = None,
) -> StructuredResult[T]:
    """Call the model once for ``schema``; repair once on invalid output; raise ModelOutputError otherwise.

    A mode the server refuses does not count as an attempt: the call moves on to the next mode.
    """
    method = method or configured_method()
    model = with_output_cap(_non_streaming(model), max_tokens or output_cap(schema))
    mode = _start_mode(model, method)
    result = StructuredResult[T](value=None, attempts=1, method=mode)  # type: ignore[arg-type]
    key, http, retried = _server_key(model), _talks_http(model), False
    while True:
        probe = http and mode != "text" and not retried and not server_modes.is_known(key, mode)
        try:
            parsed, raw, error = await _one_mode(_without_retries(model) if probe else model, schema, messages, mode, config)
        except NotImplementedError:
            mode = "text"  # the model has no native structured output: not a refusal worth logging
            continue
        except ModeRefused as refused:
            result.calls += 1
            result.errors.append(f"{mode} refused: {refused}")
            next_mode = _next_mode(mode)
            _remember(model, mode, next_mode, str(refused))
            mode, retried = next_mode, False
            continue
        except Exception:
            if not probe:
                raise
            retried = True  # not a refusal (an overloaded server?): the same mode again, with the client's retries
            continue
        break
    if http and mode != "text":
        server_modes.learn(key, mode)  # the server took it: later calls and processes send it with retries
    result.method = mode
    result.calls += 1
    i, o = _usage(raw)
    result.input_tokens += i
    result.output_tokens += o

    if parsed is None:
        parsed = _coerced(raw, schema) or _salvaged(raw, schema)
    if parsed is None:
        result.errors.append(error or "invalid output")
        # Through the same door: a small model repairing free-form writes invalid JSON again.
        repairer = model.bind(response_format=constrained_format(schema)) if mode == "json_object_schema" else model
        repaired = await _repair(repairer, schema, messages, raw, error, config, result)
        result.attempts = 2
        try:
            parsed = parse_json_strict(_raw_text(repaired), schema)
        except (ValueError, ValidationError) as exc:
            parsed = _coerced(repaired, schema)
            if parsed is None:
                result.errors.append(str(exc))
                if mode == "json_object_schema":
                    # A grammar holds the shape, not the length: a small model looping inside a string
                    # is cut at the cap twice. One last try through the forced tool (the next door).
                    parsed = await _through_the_tool(model, schema, messages, config, result)
                if parsed is None:
                    # Nothing whole: what of the replies is valid is kept, not lost with the rest.
                    parsed = _valid_parts(repaired, schema, result) or _valid_parts(raw, schema, result)
                if parsed is None:
                    raise ModelOutputError(
                        f"The model's {schema.__name__} was invalid twice (after one repair attempt): {str(exc)[:300]}"
                    ) from exc
    result.value = parsed
    return result


async def _through_the_tool(
    model: BaseChatModel, schema: type[T], messages: list[BaseMessage], config: RunnableConfig | None, result: StructuredResult
) -> T | None:
    """One call in function_calling mode, and its repair, after the schema door failed twice (the mode stays remembered)."""
    try:
        parsed, raw, error = await _one_mode(model, schema, messages, "function_calling", config)
    except ModeRefused as refused:
        result.errors.append(f"function_calling refused: {refused}")
        return None
    result.calls += 1
    result.attempts = 3
    i, o = _usage(raw)
    result.input_tokens += i
    result.output_tokens += o
    parsed = parsed or _coerced(raw, schema) or _salvaged(raw, schema)
    if parsed is not None:
        return parsed
    result.errors.append(error or "invalid output")
    repaired = await _repair(model, schema, messages, raw, error, config, result)  # as function_calling mode has it
    result.attempts = 4
    try:
        return parse_json_strict(_raw_text(repaired), schema)
    except (ValueError, ValidationError) as exc:
        result.errors.append(str(exc))
        return _coerced(repaired, schema) or _salvaged(repaired, schema)
