"""One structured model call with validation, one repair attempt, and nothing half-parsed.

Works with models that support structured output natively (OpenAI json_schema or
tool calling, the offline model) and with models that only return text: their reply
is parsed strictly as one JSON object and validated with the pydantic schema.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ValidationError

from core.errors import ModelOutputError

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

METHODS = ("auto", "json_schema", "function_calling", "json_mode", "text")


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
        raise ValueError(f"MEMORY_AGENT_STRUCTURED_OUTPUT must be one of {', '.join(METHODS)}, not {method!r}")
    return method


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
    return None


def _raw_text(raw: BaseMessage | None) -> str:
    if raw is None:
        return ""
    tool_calls = getattr(raw, "tool_calls", None)
    if tool_calls:
        return json.dumps(tool_calls[0].get("args", {}), ensure_ascii=False)
    content = raw.content
    if isinstance(content, list):
        return "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return str(content)


def _non_streaming(model: BaseChatModel) -> BaseChatModel:
    """The same model with streaming off for this call.

    Under ``stream_mode="messages"`` every model call streams, even the hidden (nostream)
    ones; a streamed structured reply is parsed piecewise by the openai SDK, which raises
    on invalid JSON without the text, so the repair could not show the model its output.
    """
    if isinstance(model, BaseChatModel) and model.disable_streaming is not True:
        return model.model_copy(update={"disable_streaming": True})
    return model


async def _text_mode(
    model: BaseChatModel, schema: type[T], messages: list[BaseMessage], config: RunnableConfig | None
) -> tuple[T | None, AIMessage, str | None]:
    raw = await model.ainvoke(_with_instruction(messages, _json_instruction(schema)), config=config)
    try:
        return parse_json_strict(_raw_text(raw), schema), raw, None
    except (ValueError, ValidationError) as exc:
        return None, raw, str(exc)


async def invoke_structured(
    model: BaseChatModel,
    schema: type[T],
    messages: list[BaseMessage],
    *,
    method: str | None = None,
    config: RunnableConfig | None = None,
) -> StructuredResult[T]:
    """Call the model once for ``schema``; repair once on invalid output; raise ModelOutputError otherwise."""
    method = method or configured_method()
    model = _non_streaming(model)
    result = StructuredResult[T](value=None, attempts=0, method=method)  # type: ignore[arg-type]
    parsed: T | None = None
    raw: BaseMessage | None = None
    error: str | None = None

    if method != "text":
        kwargs = {} if method == "auto" else {"method": method}
        call_messages = messages
        if method == "json_mode":
            # JSON mode carries no schema (and OpenAI refuses it unless the prompt says "JSON"): state it.
            call_messages = _with_instruction(messages, _json_instruction(schema))
        try:
            runnable = model.with_structured_output(schema, include_raw=True, **kwargs)
        except NotImplementedError:
            runnable = None
            result.method = "text"
        if runnable is not None:
            try:
                out = await runnable.ainvoke(call_messages, config=config)
            except ValueError as exc:
                # The openai SDK parses json_schema replies itself (also when streaming) and raises
                # before langchain's include_raw fallback sees them: invalid output, so repair it.
                out = {"raw": _raw_from_error(exc), "parsed": None, "parsing_error": exc}
            result.calls += 1
            raw, parsed = out.get("raw"), out.get("parsed")
            err = out.get("parsing_error")
            error = str(err) if err else (None if parsed is not None else "the model returned no structured output")
    if method == "text" or result.method == "text":
        result.method = "text"
        parsed, raw, error = await _text_mode(model, schema, messages, config)
        result.calls += 1
    result.attempts = 1
    i, o = _usage(raw)
    result.input_tokens += i
    result.output_tokens += o

    if parsed is None:
        result.errors.append(error or "invalid output")
        # One repair: show the model its own output and the validation error, ask for JSON only.
        repair = [
            *messages,
            AIMessage(_raw_text(raw) or "(empty reply)"),
            HumanMessage(f"That reply was not valid: {error}\nCorrect it. " + _json_instruction(schema)),
        ]
        repaired = await model.ainvoke(repair, config=config)
        result.calls += 1
        result.attempts = 2
        i, o = _usage(repaired)
        result.input_tokens += i
        result.output_tokens += o
        try:
            parsed = parse_json_strict(_raw_text(repaired), schema)
        except (ValueError, ValidationError) as exc:
            result.errors.append(str(exc))
            raise ModelOutputError(
                f"The model's {schema.__name__} was invalid twice (after one repair attempt): {str(exc)[:300]}"
            ) from exc
    result.value = parsed
    return result
