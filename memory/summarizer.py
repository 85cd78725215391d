"""The incremental fold: previous summary + newly folded messages in, new summary out.

The model never sees the full history here; only the board it wrote last time and
the messages that are leaving the model's view now. This function is the one the
summarize node and the evals call.
"""

from __future__ import annotations

import json
from typing import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

import prompts
from llm.structured import StructuredResult, invoke_structured
from core.schemas import ChatTitle, SummaryBoard

ROLE_LABELS = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def render_transcript(messages: Sequence[BaseMessage]) -> str:
    """One line per message: ``[user] …``, ``[assistant] …``, ``[tool name] …`` (tool calls noted)."""
    lines: list[str] = []
    for m in messages:
        role = ROLE_LABELS.get(m.type, m.type)
        text = m.text.strip()
        if isinstance(m, ToolMessage):
            role = f"tool {m.name or ''}".strip()
        if isinstance(m, AIMessage) and m.tool_calls:
            calls = ", ".join(f"{c['name']}({json.dumps(c['args'], ensure_ascii=False)})" for c in m.tool_calls)
            text = f"{text} (called {calls})".strip()
        if text:
            lines.append(f"[{role}] " + text.replace("\n", " "))
    return "\n".join(lines)


def build_fold_messages(previous: SummaryBoard, folded: Sequence[BaseMessage], variant: str) -> list[BaseMessage]:
    spec = prompts.summary_variant(variant)
    body = "\n\n".join(
        [
            prompts.tagged(prompts.PREVIOUS_SUMMARY_TAG, previous.model_dump_json(indent=None)),
            prompts.tagged(prompts.NEW_MESSAGES_TAG, render_transcript(folded)),
        ]
    )
    return [SystemMessage(spec.text), HumanMessage(body)]


async def fold_summary(
    model: BaseChatModel, previous: SummaryBoard, folded: Sequence[BaseMessage], variant: str, config: RunnableConfig | None = None
) -> StructuredResult[SummaryBoard]:
    return await invoke_structured(model, SummaryBoard, build_fold_messages(previous, folded, variant), config=config)


def build_recompress_messages(board: SummaryBoard, max_tokens: int, variant: str) -> list[BaseMessage]:
    """Summary of summaries: the board alone, asked to shrink under ``max_tokens``."""
    spec = prompts.summary_variant(variant)
    instruction = (
        f"{spec.text}\n\nThe summary below has grown too long. Compress it to under {max_tokens} tokens: "
        "merge overlapping items, drop resolved action items and answered questions, keep every name, number and date."
    )
    body = prompts.tagged(prompts.PREVIOUS_SUMMARY_TAG, board.model_dump_json()) + "\n\n" + prompts.tagged(prompts.NEW_MESSAGES_TAG, "")
    return [SystemMessage(instruction), HumanMessage(body)]


async def recompress_summary(
    model: BaseChatModel, board: SummaryBoard, max_tokens: int, variant: str, config: RunnableConfig | None = None
) -> StructuredResult[SummaryBoard]:
    return await invoke_structured(model, SummaryBoard, build_recompress_messages(board, max_tokens, variant), config=config)


async def make_title(model: BaseChatModel, board: SummaryBoard, config: RunnableConfig | None = None) -> StructuredResult[ChatTitle]:
    body = prompts.tagged(prompts.CHAT_SUMMARY_TAG, board.render())
    return await invoke_structured(model, ChatTitle, [SystemMessage(prompts.text("title")), HumanMessage(body)], config=config)


async def make_first_title(
    model: BaseChatModel, exchange: Sequence[BaseMessage], config: RunnableConfig | None = None
) -> StructuredResult[ChatTitle]:
    """A title from the chat's first exchange (its first user message and reply), before any summary exists."""
    body = prompts.tagged(prompts.CHAT_SUMMARY_TAG, render_transcript(exchange))
    return await invoke_structured(model, ChatTitle, [SystemMessage(prompts.text("title")), HumanMessage(body)], config=config)
