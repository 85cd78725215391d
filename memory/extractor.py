"""The extraction call: last user message + reply + related stored memories → ExtractionResult."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

import prompts
from llm.structured import StructuredResult, invoke_structured
from core.schemas import ExtractionResult


def render_stored(stored: dict[str, Any]) -> str:
    """Related memories, with ids so the model can say which fact or task it updates."""
    return json.dumps(stored, ensure_ascii=False, default=str, sort_keys=True)


def build_extraction_messages(user_message: str, reply: str, stored: dict[str, Any]) -> list[BaseMessage]:
    body = "\n\n".join(
        [
            prompts.tagged(prompts.STORED_MEMORIES_TAG, render_stored(stored)),
            prompts.tagged(prompts.USER_MESSAGE_TAG, user_message),
            prompts.tagged(prompts.ASSISTANT_REPLY_TAG, reply),
        ]
    )
    return [SystemMessage(prompts.text("extraction")), HumanMessage(body)]


async def extract(
    model: BaseChatModel, user_message: str, reply: str, stored: dict[str, Any], config: RunnableConfig | None = None
) -> StructuredResult[ExtractionResult]:
    return await invoke_structured(model, ExtractionResult, build_extraction_messages(user_message, reply, stored), config=config)
