"""Prompts live as Markdown files beside this module; this module finds and parses them.

Persona and summary-variant files start with a small front matter (title, description).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent

# Tags that frame the inputs of the summarize and extract calls. Real models read them as
# delimiters; the offline model parses them, so they are part of the contract.
PREVIOUS_SUMMARY_TAG = "previous_summary"
NEW_MESSAGES_TAG = "new_messages"
USER_MESSAGE_TAG = "user_message"
ASSISTANT_REPLY_TAG = "assistant_reply"
STORED_MEMORIES_TAG = "stored_memories"
CHAT_SUMMARY_TAG = "chat_summary"
# What the forget tool's result asks of the model (the offline model's reply leaves it out: no word to the user).
FORGET_DONE_NOTE = "Confirm it to the user without repeating it."


def tagged(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def between(text: str, tag: str) -> str | None:
    """The body of ``<tag>…</tag>`` in text, or None."""
    start, end = f"<{tag}>", f"</{tag}>"
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    if j < 0:
        return None
    return text[i + len(start) : j].strip("\n")


@dataclass(frozen=True)
class PromptFile:
    name: str
    title: str
    description: str
    text: str


def _parse(path: Path) -> PromptFile:
    raw = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    body = raw
    if raw.startswith("---\n"):
        head, _, body = raw[4:].partition("\n---\n")
        for line in head.splitlines():
            key, _, value = line.partition(":")
            meta[key.strip()] = value.strip()
    return PromptFile(
        name=path.stem,
        title=meta.get("title", path.stem),
        description=meta.get("description", ""),
        text=body.strip(),
    )


def _named(folder: str) -> dict[str, PromptFile]:
    return {p.stem: _parse(p) for p in sorted((PROMPTS_DIR / folder).glob("*.md"))}


@lru_cache(maxsize=None)
def personas() -> dict[str, PromptFile]:
    return _named("personas")


@lru_cache(maxsize=None)
def summary_variants() -> dict[str, PromptFile]:
    return _named("summary_variants")


def persona(name: str) -> PromptFile:
    found = personas()
    if name not in found:
        raise ValueError(f"unknown persona {name!r}; choose one of: {', '.join(found)}")
    return found[name]


def summary_variant(name: str) -> PromptFile:
    found = summary_variants()
    if name not in found:
        raise ValueError(f"unknown summary prompt variant {name!r}; choose one of: {', '.join(found)}")
    return found[name]


@lru_cache(maxsize=None)
def text(name: str) -> str:
    """A plain prompt file by name: extraction, title, reply_rules, reply_rules_brief."""
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8").strip()


# Read every prompt file once at import: nodes run on the event loop, and LangGraph Server
# flags blocking file reads there.
personas()
summary_variants()
for _name in ("extraction", "title", "reply_rules", "reply_rules_brief"):
    text(_name)
