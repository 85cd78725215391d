"""The extraction call: last user message + reply + related stored memories → ExtractionResult."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

import prompts
from llm.structured import StructuredResult, invoke_structured
from core.schemas import ExtractionResult, NewFact

log = logging.getLogger(__name__)

# The example facts the prompt and the schema show the model. Small models copy them as facts
# (the 1.5B stored "Lives in Haifa" for "I have a jeep"); such a copy is kept only when the user
# named what the example names (its capitalised words: Haifa, Rex).
_NEW_FACTS_RULE = next(line for line in prompts.text("extraction").splitlines() if line.startswith("- new_facts:"))
EXAMPLE_FACTS = tuple(
    dict.fromkeys(re.findall(r'"([^"]+)"', _NEW_FACTS_RULE) + re.findall(r"e\.g\. '([^']+)'", NewFact.model_fields["text"].description or ""))
)


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
    result = await invoke_structured(model, ExtractionResult, build_extraction_messages(user_message, reply, stored), config=config)
    return replace(result, value=drop_echoed_examples(result.value, user_message))


def _names(text: str) -> set[str]:
    return {w.casefold() for w in re.findall(r"\w+", text)[1:] if w[:1].isupper()}


def drop_echoed_examples(result: ExtractionResult, user_message: str) -> ExtractionResult:
    """``result`` without new facts that repeat one of the prompt's examples the user never spoke of."""
    examples = {e.casefold(): _names(e) for e in EXAMPLE_FACTS}
    said = {w.casefold() for w in re.findall(r"\w+", user_message)}
    kept = [f for f in result.new_facts if f.text.casefold() not in examples or examples[f.text.casefold()] <= said]
    if len(kept) < len(result.new_facts):
        log.warning("extraction: dropped %d fact(s) copied from the prompt's examples", len(result.new_facts) - len(kept))
        return result.model_copy(update={"new_facts": kept})
    return result
