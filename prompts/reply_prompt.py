"""The single function that builds what the model sees, from explicit labelled sections.

Order, most stable first, so a provider's prompt cache (OpenAI, Anthropic, llama.cpp's
``cache_prompt``) reuses the longest prefix from one turn to the next:

1. one system message: persona and rules, then the conversation summary (it changes only when
   older messages are folded into it);
2. the recent conversation (messages after the summary's cursor; it only grows between folds);
3. the current message, opening with when it was sent (and the days the conversation shown
   before it spans) and what was found for it: the user's profile and preferences,
   the facts ranked for it, open tasks, related chats, relevant knowledge and excerpts of earlier
   conversations, each labelled, then the user's own words under ``MESSAGE_HEADER``. (The
   profile sits here, not in the system message: a new user's first turns teach it a name, a
   city, a preference, and each change there would make the whole prompt new to the cache.)
   The next turn shows that message as the user wrote it, so only this last message differs
   from the cached prefix. (It travels in the user
   message, not in a second system message, because Anthropic and Gemini accept a system
   message only first.)

The prompt as a whole has a budget (``PromptBudgets.total``, Context ``prompt_token_budget``):
the system text, summary, recent conversation, user context and knowledge each keep within their
own budget, and the excerpts of earlier conversations take what they leave (at most
``PromptBudgets.episodes``), so the whole prompt holds the total whatever the conversation.
Each budget is applied in one place: here for every section but the knowledge, whose chunks
retrieval chose within ``Context.rag_token_budget``, costing each as this module renders it
(:func:`chunk_cost`), so the section it renders holds that budget and is shown as given.
(``summarize`` compares the board with the summary's budget only to decide when to spend a model
call recompressing it; the cut to the budget is here.) The output is deterministic: the same inputs always give the same messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

import prompts
from core.context import Context
from core.contracts import Chunk, LoadedContext, TaskLine
from core.dates import due_phrase
from core.messages import sent_at
from core.past_dates import day_text
from core.tokens import count_message_tokens, count_tokens, truncate_lines
from prompts.excerpts import pack_excerpts, render_excerpts

NOW_HEADER = "## Now"
USER_CONTEXT_HEADER = "## User context"
SUMMARY_HEADER = "## Conversation summary"
MEMORIES_HEADER = "## Remembered for this message"
KNOWLEDGE_HEADER = "## Relevant knowledge"
EPISODES_HEADER = "## From earlier conversations"
MESSAGE_HEADER = "## The user's message"
SECTION_HEADERS = (NOW_HEADER, USER_CONTEXT_HEADER, SUMMARY_HEADER, MEMORIES_HEADER, KNOWLEDGE_HEADER, EPISODES_HEADER, MESSAGE_HEADER)
# Opens the current message when memory came with it: the model must not take it for the user's words.
FOUND_NOTE = "(Found in memory for this message; the user did not write this part.)"


@dataclass
class PromptBudgets:
    """Token budget of each section; the defaults are the Context settings' (written once, there)."""

    system: int = 800
    user_context: int = Context.user_context_token_budget
    summary: int = Context.summary_token_budget
    episodes: int = Context.episodic_token_budget  # the most the excerpts take, of what the others leave
    recent: int = Context.max_context_tokens
    total: int = Context.prompt_token_budget  # the whole prompt (0: only the sections' own budgets)


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


def _task_line(task: TaskLine) -> str:
    due = f", due {due_phrase(task.get('due'), task.get('due_date'))}" if task.get("due") or task.get("due_date") else ""
    return f"- [{task['id']}] {task['description']} ({task['status']}{due})"


def now_text(current: BaseMessage, recent: Sequence[BaseMessage]) -> str:
    """When the user's message was sent and the days the conversation shown before it spans, in
    UTC (no user time zone is known): the model dates "yesterday", an excerpt's age and a resumed
    chat's turns against it. "" when the message has no time."""
    now = sent_at(current)
    if now is None:
        return ""
    now = now.astimezone(timezone.utc) if now.tzinfo else now
    text = f"{now:%A}, {day_text(now)}, {now:%H:%M} UTC."
    days = [t for t in (sent_at(m) for m in recent) if t is not None]
    if not days:
        return text
    first, last = day_text(min(days)), day_text(max(days))
    if first == last:
        return f"{text} The conversation above is from {'today' if first == day_text(now) else first}."
    return f"{text} The conversation above runs from {first} to {'today' if last == day_text(now) else last}."


def render_profile(loaded: LoadedContext) -> str:
    """The stable part of the user context: profile and preferences as labelled lines."""
    sections = (("Profile:", _field_lines(loaded.get("profile") or {})), ("Preferences:", _field_lines(loaded.get("preferences") or {})))
    return "\n".join(line for heading, items in sections if items for line in (heading, *items))


def render_memories(loaded: LoadedContext) -> str:
    """What was found for this message: ranked facts, open tasks and related chats as labelled lines."""
    sections = (
        ("Facts (most relevant first):", [f"- {f['text']}" for f in loaded.get("facts") or []]),
        ("Open tasks:", [_task_line(t) for t in loaded.get("tasks") or []]),
        ("Related earlier chats:", [f"- \"{c['title']}\": {c['summary_snippet']}" for c in loaded.get("related_chats") or []]),
    )
    return "\n".join(line for heading, items in sections if items for line in (heading, *items))


def render_user_context(loaded: LoadedContext) -> str:
    """Profile, preferences, ranked facts, open tasks and related chats as labelled lines."""
    return "\n".join(part for part in (render_profile(loaded), render_memories(loaded)) if part)


KNOWLEDGE_SEPARATOR = "\n\n"


def render_chunk(citation: str, heading_path: str, content: str) -> str:
    """One knowledge chunk as the prompt shows it; retrieval costs chunks by this text."""
    heading = f" ({heading_path})" if heading_path else ""
    return f"[{citation}]{heading}\n{content.strip()}"


def chunk_cost(citation: str, heading_path: str, content: str) -> int:
    """Tokens a chunk adds to the knowledge section (with its separator), so per-chunk costs bound the section."""
    return count_tokens(render_chunk(citation, heading_path, content) + KNOWLEDGE_SEPARATOR)


def render_knowledge(chunks: Sequence[Chunk]) -> str:
    """The chunks in order, whole: retrieval chose them within the knowledge budget (by :func:`chunk_cost`)."""
    return KNOWLEDGE_SEPARATOR.join(render_chunk(c["citation"], c.get("heading_path") or "", c["content"]) for c in chunks)


def system_text(persona_text: str, brief: bool = False) -> str:
    """The persona and the rules; ``brief`` (Context.reply_rules, for small local models): one line of rules."""
    if brief:
        return f"{persona_text.strip()} {prompts.text('reply_rules_brief')}"
    return f"{persona_text.strip()}\n\n{prompts.text('reply_rules')}"


def first_sentence(text: str) -> str:
    """A named persona under the brief layout: its first sentence ("You are a patient tutor.")."""
    text = " ".join(text.split())
    end = re.search(r"[.!?](?=\s|$)", text)
    return text[: end.end()] if end else text


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


def _section(header: str, body: str) -> str:
    # Empty sections are still labelled, so the model knows it has nothing rather than guessing.
    return f"{header}\n{body if body.strip() else '(none)'}"


def _filled_section(header: str, body: str) -> str:
    # The brief layout: a small model read "(none)" sections as text to answer or recite.
    return f"{header}\n{body}" if body.strip() else ""


def build_prompt(
    *,
    persona_text: str,
    loaded_context: LoadedContext,
    summary_text: str,
    knowledge: Sequence[Chunk],
    recent: Sequence[BaseMessage],
    current: BaseMessage,
    budgets: PromptBudgets | None = None,
    brief: bool = False,
) -> BuiltPrompt:
    """The reply prompt. ``brief``: the small-model layout (Context.reply_rules): short rules, and
    only the sections memory filled (the current message is the user's words alone when none is)."""
    budgets = budgets or PromptBudgets()
    system = truncate_lines(system_text(persona_text, brief), budgets.system)
    tokens = {"system": count_tokens(system)}

    # The user-context budget covers both parts; the stable profile is served first.
    profile = truncate_lines(render_profile(loaded_context), budgets.user_context)
    memories = truncate_lines(render_memories(loaded_context), max(0, budgets.user_context - count_tokens(profile)))
    summary = truncate_lines(summary_text, budgets.summary)
    knowledge_text = render_knowledge(knowledge)
    tokens.update(user_context=count_tokens(profile) + count_tokens(memories), summary=count_tokens(summary), knowledge=count_tokens(knowledge_text))
    section = _filled_section if brief else _section
    stable = "\n\n".join(part for part in [system, section(SUMMARY_HEADER, summary)] if part)
    kept_recent = _fit_recent(recent, budgets.recent)
    tokens["recent"] = count_message_tokens(kept_recent) if kept_recent else 0
    tokens["current"] = count_message_tokens([HumanMessage(current.text)])
    now = now_text(current, kept_recent)
    tokens["now"] = count_tokens(now)

    def assemble(episodes_text: str) -> list[BaseMessage]:
        sections = [section(USER_CONTEXT_HEADER, profile), section(MEMORIES_HEADER, memories), section(KNOWLEDGE_HEADER, knowledge_text), section(EPISODES_HEADER, episodes_text)]
        if not any(sections):  # brief, and memory found nothing: the user's words alone (the time too: a small model recited it)
            return [SystemMessage(stable), *kept_recent, HumanMessage(current.text, id=current.id)]
        found = "\n\n".join([FOUND_NOTE, *(s for s in [_filled_section(NOW_HEADER, now), *sections] if s)])
        return [SystemMessage(stable), *kept_recent, HumanMessage(f"{found}\n\n{MESSAGE_HEADER}\n{current.text}", id=current.id)]

    ranked = loaded_context.get("excerpts") or []
    budget = budgets.episodes
    if budgets.total and ranked:
        # The excerpts take what the rest leaves: the prompt without them, and what their text
        # adds to the current message in place of "(none)".
        rest = count_message_tokens(assemble(""))
        budget = min(budget, budgets.total - rest + count_tokens("(none)") - 1)
    episodes_text = render_excerpts(pack_excerpts(ranked, budget))
    messages = assemble(episodes_text)
    while budgets.total and episodes_text and count_message_tokens(messages) > budgets.total:
        budget -= max(1, count_message_tokens(messages) - budgets.total)  # the counter's rounding, or brief's headers the estimate left out
        episodes_text = render_excerpts(pack_excerpts(ranked, budget))
        messages = assemble(episodes_text)
    tokens["episodes"] = count_tokens(episodes_text)
    return BuiltPrompt(messages=messages, section_tokens=tokens)


def user_words(message: BaseMessage | str) -> str:
    """The user's own words of a current message built here (the whole text of any other message)."""
    return found_apart(message)[1]


def found_apart(message: BaseMessage | str) -> tuple[str, str]:
    """What memory found and the user's own words, of a current message built here ("" and the
    whole text for any other message)."""
    text = message if isinstance(message, str) else message.text
    marker = f"\n\n{MESSAGE_HEADER}\n"
    if text.startswith(FOUND_NOTE) and marker in text:
        found, words = text.split(marker, 1)
        return found, words
    return "", text


def parse_sections(prompt: str | Sequence[BaseMessage]) -> dict[str, str]:
    """Split a prompt built here back into its sections (used by the offline model and tests):
    the system message's and the current message's, keyed by header ("system": the rules)."""
    if not isinstance(prompt, str):
        system = next((m.text for m in prompt if isinstance(m, SystemMessage)), "")
        current = next((m.text for m in reversed(prompt) if isinstance(m, HumanMessage)), "")
        prompt = f"{system}\n{current}" if current.startswith(FOUND_NOTE) else system
    out: dict[str, str] = {}
    section = "system"
    buf: list[str] = []
    for line in prompt.splitlines():
        if line.strip() in SECTION_HEADERS:
            out[section] = "\n".join(buf).strip()
            section, buf = line.strip(), []
        elif line.strip() != FOUND_NOTE:
            buf.append(line)
    out[section] = "\n".join(buf).strip()
    return {k: ("" if v == "(none)" else v) for k, v in out.items()}
