"""The single function that builds what the model sees, from explicit labelled sections.

Order: persona/system (with the precedence rules) → user context → conversation
summary → relevant knowledge → excerpts of earlier conversations, all in one system
message; then the recent conversation (messages after the summary's cursor) and the
current message. What stays the same from turn to turn comes first (the system text,
then the user context, which opens with the profile and preferences), so providers'
prompt caches (OpenAI, Anthropic, llama.cpp) reuse that prefix; what each message
brings (facts ranked for it, knowledge, excerpts) follows.
Every section has its own token budget and the output is deterministic: the same
inputs always give the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

import prompts
from core.dates import due_phrase
from core.tokens import count_message_tokens, count_tokens, fit_blocks, truncate_lines

USER_CONTEXT_HEADER = "## User context"
SUMMARY_HEADER = "## Conversation summary"
KNOWLEDGE_HEADER = "## Relevant knowledge"
EPISODES_HEADER = "## From earlier conversations"
SECTION_HEADERS = (USER_CONTEXT_HEADER, SUMMARY_HEADER, KNOWLEDGE_HEADER, EPISODES_HEADER)


@dataclass
class PromptBudgets:
    system: int = 800
    user_context: int = 800
    summary: int = 600
    knowledge: int = 1200
    episodes: int = 1500
    recent: int = 6000


@dataclass
class BuiltPrompt:
    messages: list[BaseMessage]
    section_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return sum(self.section_tokens.values())


def _field_lines(fields: dict[str, Any]) -> list[str]:
    """``- key: value`` for each field that has a value (list values comma-joined)."""
    return [f"- {key}: {', '.join(value) if isinstance(value, list) else value}" for key, value in fields.items() if value not in (None, "", [])]


def _task_line(task: dict[str, Any]) -> str:
    due = f", due {due_phrase(task.get('due'), task.get('due_date'))}" if task.get("due") or task.get("due_date") else ""
    return f"- [{task['id']}] {task['description']} ({task['status']}{due})"


def render_user_context(loaded: dict[str, Any]) -> str:
    """Profile, preferences, ranked facts, open tasks and related chats as labelled lines."""
    sections = (
        ("Profile:", _field_lines(loaded.get("profile") or {})),
        ("Preferences:", _field_lines(loaded.get("preferences") or {})),
        ("Facts (most relevant first):", [f"- {f['text']}" for f in loaded.get("facts") or []]),
        ("Open tasks:", [_task_line(t) for t in loaded.get("tasks") or []]),
        ("Related earlier chats:", [f"- \"{c['title']}\": {c['summary_snippet']}" for c in loaded.get("related_chats") or []]),
    )
    return "\n".join(line for heading, items in sections if items for line in (heading, *items))


KNOWLEDGE_SEPARATOR = "\n\n"


def render_chunk(citation: str, heading_path: str, content: str) -> str:
    """One knowledge chunk as the prompt shows it; retrieval costs chunks by this text."""
    heading = f" ({heading_path})" if heading_path else ""
    return f"[{citation}]{heading}\n{content.strip()}"


def chunk_cost(citation: str, heading_path: str, content: str) -> int:
    """Tokens a chunk adds to the knowledge section (with its separator), so per-chunk costs bound the section."""
    return count_tokens(render_chunk(citation, heading_path, content) + KNOWLEDGE_SEPARATOR)


def render_knowledge(chunks: Sequence[dict[str, Any]], budget: int | None = None) -> str:
    """The chunks in order; with a budget, only the leading whole chunks that fit (none is cut)."""
    parts = [render_chunk(c["citation"], c.get("heading_path") or "", c["content"]) for c in chunks]
    if budget is not None:
        parts = fit_blocks(parts, budget, KNOWLEDGE_SEPARATOR)
    return KNOWLEDGE_SEPARATOR.join(parts)


# Excerpts of earlier conversations (memory.episodes.recall): one block per run of neighbouring
# messages of a chat, headed by its date and chat title; a line says who spoke, and its own
# date when the block spans days.
EXCERPT_SEPARATOR = "\n\n"
# A chat title is shown up to this long in an excerpt's header.
TITLE_CHARS = 60


def excerpt_date(when: datetime) -> str:
    return f"{when.day} {when:%B %Y}"  # "8 May 2023": how people (and LoCoMo's answers) write dates


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


# A longer message is cut here: an excerpt reminds, the history tool reads whole messages.
EXCERPT_LINE_CHARS = 700


def excerpt_line(role: str, text: str, date: str = "") -> str:
    words = " ".join(text.split())
    if len(words) > EXCERPT_LINE_CHARS:
        words = words[: EXCERPT_LINE_CHARS - 1].rstrip() + "…"
    return f"{role}{f' ({date})' if date else ''}: {words}"


def render_excerpt(excerpt: dict[str, Any]) -> str:
    lines = excerpt.get("lines") or []
    if not lines:
        return ""
    first = excerpt_date(_when(lines[0]["sent_at"]))
    title = excerpt.get("chat_title") or "a chat"
    out = [f'[{first}, "{title[:TITLE_CHARS]}"]']
    for line in lines:
        date = excerpt_date(_when(line["sent_at"]))
        out.append(excerpt_line(line["role"], line["text"], "" if date == first else date))
    return "\n".join(out)


def render_excerpts(excerpts: Sequence[dict[str, Any]], budget: int | None = None) -> str:
    """The excerpts in order; with a budget, only the leading whole ones that fit."""
    parts = [p for p in (render_excerpt(e) for e in excerpts) if p]
    if budget is not None:
        parts = fit_blocks(parts, budget, EXCERPT_SEPARATOR)
    return EXCERPT_SEPARATOR.join(parts)


def system_text(persona_text: str) -> str:
    return f"{persona_text.strip()}\n\n{prompts.text('reply_rules')}"


def _fit_recent(recent: Sequence[BaseMessage], budget: int) -> list[BaseMessage]:
    """Keep the newest messages that fit, starting on a human turn so no tool result is orphaned."""
    if not recent:
        return []
    if count_message_tokens(recent) <= budget:
        return list(recent)
    kept = trim_messages(
        list(recent),
        max_tokens=budget,
        strategy="last",
        token_counter=count_message_tokens,
        start_on="human",
        allow_partial=False,
    )
    while kept and isinstance(kept[0], ToolMessage):  # belt and braces: never orphan a tool result
        kept = kept[1:]
    return kept


def build_prompt(
    *,
    persona_text: str,
    loaded_context: dict[str, Any],
    summary_text: str,
    knowledge: Sequence[dict[str, Any]],
    recent: Sequence[BaseMessage],
    current: BaseMessage,
    budgets: PromptBudgets | None = None,
) -> BuiltPrompt:
    budgets = budgets or PromptBudgets()
    system = truncate_lines(system_text(persona_text), budgets.system)
    sections = [system]
    tokens = {"system": count_tokens(system)}

    user_context = truncate_lines(render_user_context(loaded_context), budgets.user_context)
    summary = truncate_lines(summary_text, budgets.summary)
    knowledge_text = render_knowledge(knowledge, budgets.knowledge)
    episodes_text = render_excerpts(loaded_context.get("excerpts") or [], budgets.episodes)
    for header, body, key in (
        (USER_CONTEXT_HEADER, user_context, "user_context"),
        (SUMMARY_HEADER, summary, "summary"),
        (KNOWLEDGE_HEADER, knowledge_text, "knowledge"),
        (EPISODES_HEADER, episodes_text, "episodes"),
    ):
        # Empty sections are still labelled, so the model knows it has nothing rather than guessing.
        sections.append(f"{header}\n{body if body.strip() else '(none)'}")
        tokens[key] = count_tokens(body)

    kept_recent = _fit_recent(recent, budgets.recent)
    tokens["recent"] = count_message_tokens(kept_recent) if kept_recent else 0
    current_msg = current if isinstance(current, HumanMessage) else HumanMessage(str(current.content))
    tokens["current"] = count_message_tokens([current_msg])
    messages: list[BaseMessage] = [SystemMessage("\n\n".join(sections)), *kept_recent, current_msg]
    return BuiltPrompt(messages=messages, section_tokens=tokens)


def parse_sections(system_message: str) -> dict[str, str]:
    """Split a system message built here back into its sections (used by the offline model and tests)."""
    out: dict[str, str] = {}
    current = "system"
    buf: list[str] = []
    for line in system_message.splitlines():
        if line.strip() in SECTION_HEADERS:
            out[current] = "\n".join(buf).strip()
            current, buf = line.strip(), []
        else:
            buf.append(line)
    out[current] = "\n".join(buf).strip()
    return {k: ("" if v == "(none)" else v) for k, v in out.items()}
