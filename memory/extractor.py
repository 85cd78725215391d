"""The extraction call: last user message + reply + related stored memories → ExtractionResult."""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from dataclasses import replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

import prompts
from llm.structured import StructuredResult, invoke_structured
from core.schemas import ExtractionResult, NewFact, ProfileUpdates
from memory.queries import STOPWORDS

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


# Memories come from what the user said; the reply is only context for it ("yes, added"), and a
# local model reads every prompt token before its first output token: its head is enough.
REPLY_CONTEXT_CHARS = 600


def reply_context(reply: str) -> str:
    """The head of the assistant's reply, cut at a word, for the extraction prompt."""
    if len(reply) <= REPLY_CONTEXT_CHARS:
        return reply
    return reply[:REPLY_CONTEXT_CHARS].rsplit(" ", 1)[0] + " …"


def build_extraction_messages(user_message: str, reply: str, stored: dict[str, Any]) -> list[BaseMessage]:
    # The instructions first and unchanged from turn to turn: a server's prompt cache reuses them.
    body = "\n\n".join(
        [
            prompts.tagged(prompts.STORED_MEMORIES_TAG, render_stored(stored)),
            prompts.tagged(prompts.USER_MESSAGE_TAG, user_message),
            prompts.tagged(prompts.ASSISTANT_REPLY_TAG, reply_context(reply)),
        ]
    )
    return [SystemMessage(prompts.text("extraction")), HumanMessage(body)]


async def extract(
    model: BaseChatModel, user_message: str, reply: str, stored: dict[str, Any], config: RunnableConfig | None = None
) -> StructuredResult[ExtractionResult]:
    result = await invoke_structured(model, ExtractionResult, build_extraction_messages(user_message, reply, stored), config=config)
    value = drop_echoed_examples(result.value, user_message)
    value = drop_unstated_profile_values(value, user_message, stored.get("profile") or {})
    return replace(result, value=value)


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


def _folded_words(text: str) -> list[str]:
    plain = unicodedata.normalize("NFKD", text.casefold())
    return re.findall(r"\w+", "".join(c for c in plain if not unicodedata.combining(c)))


def _stated(value: str, said: list[str]) -> bool:
    """Some word of ``value`` is in the message: whole when short ("A2"), else its first four letters
    inside a word of the message ("Italian" in "italiano"; Hebrew "חיפה" in "בחיפה", in Haifa)."""
    for word in _folded_words(value):
        if word in STOPWORDS:
            continue
        if len(word) <= 3:
            if word in said:
                return True
        elif any(word[:4] in w for w in said):
            return True
    return False


def drop_unstated_profile_values(result: ExtractionResult, user_message: str, stored_profile: dict[str, Any] | None = None) -> ExtractionResult:
    """``result`` without profile values the user's message does not contain.

    The profile holds what the user said about themselves; the 1.5B filled every field of an MSC
    speaker who had only said "I have a jeep" (name "bot_0", location Haifa, role "assistant", level
    "intermediate"). A value none of whose words is in the message is a guess, not a statement; what
    a larger model rightly infers ("München" → Munich) is lost from the profile, and is still free to
    arrive as a fact.
    """
    said = _folded_words(user_message)
    stored_profile = stored_profile or {}
    kept: dict = {}
    invented: list[str] = []  # a stored value sent again changes nothing: dropped without a warning
    for field in ProfileUpdates.model_fields:
        value, before = getattr(result.profile_updates, field), stored_profile.get(field)
        if isinstance(value, str) and not _stated(value, said):
            if value != before:
                invented.append(field)
            continue
        if isinstance(value, list):
            stated = [v for v in value if _stated(v, said)]
            if any(v not in (before or []) for v in value if v not in stated):
                invented.append(field)
            value = stated
        kept[field] = value
    if invented:
        log.warning("extraction: dropped profile value(s) the user did not state: %s", ", ".join(invented))
    if kept == result.profile_updates.model_dump():
        return result
    return result.model_copy(update={"profile_updates": ProfileUpdates.model_validate(kept)})
