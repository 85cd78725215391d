"""A transparent proxy around the chat model that counts every call the production code makes.

The eval registers ``MeteredChatModel(inner=<the real model>)`` under a fresh
name with ``llm.chat_model.register_model`` and passes that name in
``Context.model``; the production nodes then load it like any other model. The
proxy changes nothing about the call: it forwards plain calls to
``inner.ainvoke`` and structured calls to ``inner.with_structured_output``
(so OpenAI still uses json_schema, the offline model still answers with its
extractive stand-in) and only records, per call, its kind, tokens and wall
time.

Call kinds come from the tags the prompts put around their inputs: ``fold``
(``<new_messages>`` with content), ``recompress`` (empty ``<new_messages>``),
``title`` (``<chat_summary>``), ``extract`` (``<user_message>``), else
``other``. A repair attempt repeats the original prompt, so it is counted
under the same kind.

Token counts are the model's own ``usage_metadata`` when it reports one (OpenAI,
the offline model's estimate); otherwise they are estimated with the same
~4-characters-a-token counter the graph uses, and ``usage_reported`` is False.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableConfig, RunnableLambda
from pydantic import ConfigDict

import prompts
from core.tokens import count_message_tokens, count_tokens
from llm.chat_model import model_label

__all__ = ["CallMeter", "CallRecord", "MeteredChatModel", "call_kind"]


def call_kind(messages: Sequence[BaseMessage]) -> str:
    """fold, recompress, title, extract or other (see the module docstring)."""
    for m in messages:
        if not isinstance(m, HumanMessage):
            continue
        text = m.text
        new = prompts.between(text, prompts.NEW_MESSAGES_TAG)
        if new is not None:
            return "fold" if new.strip() else "recompress"
        if prompts.between(text, prompts.CHAT_SUMMARY_TAG) is not None:
            return "title"
        if prompts.between(text, prompts.USER_MESSAGE_TAG) is not None:
            return "extract"
    return "other"


@dataclass(frozen=True)
class CallRecord:
    kind: str
    input_tokens: int
    output_tokens: int
    seconds: float
    usage_reported: bool


@dataclass
class CallMeter:
    records: list[CallRecord] = field(default_factory=list)

    def record(self, messages: Sequence[BaseMessage], raw: Any, seconds: float) -> None:
        usage = getattr(raw, "usage_metadata", None) or {}
        reported = bool(usage.get("input_tokens") or usage.get("output_tokens"))
        if reported:
            tokens_in, tokens_out = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        else:
            tokens_in = count_message_tokens(list(messages))
            tokens_out = count_tokens(raw.text if isinstance(raw, BaseMessage) else "")
        self.records.append(CallRecord(call_kind(messages), tokens_in, tokens_out, seconds, reported))

    def since(self, start: int) -> list[CallRecord]:
        return self.records[start:]


def _as_messages(model_input: Any) -> list[BaseMessage]:
    if isinstance(model_input, PromptValue):
        return model_input.to_messages()
    if isinstance(model_input, str):
        return [HumanMessage(model_input)]
    return convert_to_messages(model_input)


class MeteredChatModel(BaseChatModel):
    """Forwards to ``inner``; records each call in ``meter``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseChatModel
    meter: CallMeter

    @property
    def _llm_type(self) -> str:
        return f"metered-{getattr(self.inner, '_llm_type', 'model')}"

    @property
    def model_name(self) -> str:
        return model_label(self.inner)

    # BaseChatModel's hooks; the run manager is not forwarded: the inner model's own callbacks report.
    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        start = time.perf_counter()
        out = self.inner.invoke(messages, stop=stop, **kwargs)
        self.meter.record(messages, out, time.perf_counter() - start)
        return ChatResult(generations=[ChatGeneration(message=out)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        start = time.perf_counter()
        out = await self.inner.ainvoke(messages, stop=stop, **kwargs)
        self.meter.record(messages, out, time.perf_counter() - start)
        if not isinstance(out, AIMessage):
            out = AIMessage(content=out.text)
        return ChatResult(generations=[ChatGeneration(message=out)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any):
        # Replies are not metered here (the eval reads them from turn_usage); pass the binding through.
        return self.inner.bind_tools(tools, **kwargs)

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, **kwargs: Any):
        # NotImplementedError propagates: invoke_structured then falls back to text mode via _agenerate.
        runnable = self.inner.with_structured_output(schema, include_raw=True, **kwargs)
        meter = self.meter

        def finish(out: dict) -> Any:
            if include_raw:
                return out
            if out.get("parsing_error"):
                raise out["parsing_error"]
            return out.get("parsed")

        def run(model_input: Any, config: RunnableConfig | None = None) -> Any:
            messages = _as_messages(model_input)
            start = time.perf_counter()
            out = runnable.invoke(messages, config=config)
            meter.record(messages, out.get("raw"), time.perf_counter() - start)
            return finish(out)

        async def arun(model_input: Any, config: RunnableConfig | None = None) -> Any:
            messages = _as_messages(model_input)
            start = time.perf_counter()
            out = await runnable.ainvoke(messages, config=config)
            meter.record(messages, out.get("raw"), time.perf_counter() - start)
            return finish(out)

        return RunnableLambda(run, afunc=arun, name=f"Metered[{getattr(schema, '__name__', 'schema')}]")
