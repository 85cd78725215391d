"""Scripted chat models for tests: the only part of the system tests may fake.

langchain-core's fake chat models raise on ``bind_tools`` and
``with_structured_output``; this subclass supports both, records every call, and
answers through a ``responder`` that sees the prompt, so one model can serve the
reply, summarize, title and extraction calls of a turn.
"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import Field

import prompts
from llm.chat_model import register_model, unregister_model

Responder = Callable[[str, list[BaseMessage]], "AIMessage | str | dict"]


def call_kind(messages: list[BaseMessage]) -> str:
    """Which of the agent's calls this is: reply, fold, title or extract."""
    return kind_of_user_text("\n".join(str(m.content) for m in messages if m.type == "human"))


def kind_of_user_text(text: str) -> str:
    """The call kind from the user-role text of a prompt (the tags the agent frames its inputs with)."""
    if f"<{prompts.USER_MESSAGE_TAG}>" in text:
        return "extract"
    if f"<{prompts.NEW_MESSAGES_TAG}>" in text:
        return "fold"
    if f"<{prompts.CHAT_SUMMARY_TAG}>" in text:
        return "title"
    return "reply"


class ScriptedChatModel(GenericFakeChatModel):
    responder: Callable[..., Any]
    messages: Iterator[Any] = Field(default_factory=lambda: iter(()))
    calls: list[tuple[str, list[BaseMessage]]] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        kind = call_kind(messages)
        self.calls.append((kind, list(messages)))
        out = self.responder(kind, messages)
        if isinstance(out, dict):
            out = json.dumps(out)
        message = AIMessage(content=out) if isinstance(out, str) else out
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        # One chunk carrying the whole message, tool calls included (the parent drops them).
        message = self._generate(messages, stop=stop, run_manager=run_manager, **kwargs).generations[0].message
        chunk = AIMessageChunk(
            content=message.content,
            id=message.id,
            tool_call_chunks=[
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                for i, c in enumerate(message.tool_calls)
            ],
            usage_metadata=message.usage_metadata,
        )
        if run_manager:
            run_manager.on_llm_new_token(str(message.content), chunk=ChatGenerationChunk(message=chunk))
        yield ChatGenerationChunk(message=chunk)

    def bind_tools(self, tools, **kwargs):
        return self

    def with_structured_output(self, schema, *, include_raw: bool = False, **kwargs):
        def parse(messages):
            raw = self.invoke(messages)
            try:
                parsed, error = schema.model_validate_json(raw.content), None
            except Exception as exc:  # the caller decides what to do with invalid output
                parsed, error = None, exc
            if include_raw:
                return {"raw": raw, "parsed": parsed, "parsing_error": error}
            if error:
                raise error
            return parsed

        return RunnableLambda(parse)

    def calls_of(self, kind: str) -> list[list[BaseMessage]]:
        return [m for k, m in self.calls if k == kind]


def plain_answers(
    *, extract: Callable[[str], dict], title: str, summary: str, reply: str | Callable[[list[BaseMessage]], "AIMessage | str"]
) -> Responder:
    """A responder for tests whose turns need plain answers: the extraction is ``extract`` of the user
    message, a title call gets ``title``, a fold a board of ``summary`` alone, a reply ``reply``
    (or, when callable, ``reply(messages)``)."""

    def respond(kind: str, messages: list[BaseMessage]) -> str | dict:
        if kind == "extract":
            return extract(prompts.between(str(messages[-1].content), prompts.USER_MESSAGE_TAG))
        if kind == "title":
            return {"title": title}
        if kind == "fold":
            return {"summary": summary}
        return reply(messages) if callable(reply) else reply

    return respond


@contextmanager
def registered_scripted_model(responder: Responder) -> Iterator[tuple[str, ScriptedChatModel]]:
    """A ScriptedChatModel answering through ``responder``, registered under a fresh name (what
    ``Context.model`` takes) until the block ends; yields the name and the model."""
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    model = ScriptedChatModel(responder=responder)
    register_model(name, model)
    try:
        yield name, model
    finally:
        unregister_model(name)


def empty_extraction() -> dict:
    return {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []}
