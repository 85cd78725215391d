"""The baselines of ``eval recall`` (see ``evals.recall_eval``): whole_history, recent and bm25_turns
(raw turns within a token budget, shown as ``[8 May 2023] Caroline: text``), and bm25_excerpts
(the memory-agent's own prompt with plain BM25 turns packed as its excerpts)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from core.context import Context
from core.contracts import Excerpt, ExcerptLine, LoadedContext
from core.messages import sent_at
from core.state import State
from core.tokens import CHARS_PER_TOKEN, count_message_tokens, count_tokens
from evals.metrics.prompt_recall import BM25
from memory.chat_import import ChatImport, ImportedMessage
from memory.episodes import conversation
from nodes.reply import reply_prompt
from prompts.excerpts import render_excerpt
from prompts.reply_prompt import BuiltPrompt

__all__ = ["TurnIndex", "baseline_prompts", "bm25_excerpts_prompt", "turn_line"]


def turn_line(m: ImportedMessage) -> str:
    return f"[{m.time.day} {m.time:%B %Y}] {m.text}"


def _fit(lines: list[str], question: HumanMessage, budget: int, *, contiguous: bool = False) -> list[BaseMessage]:
    """The lines, in the order given, while the prompt stays within ``budget`` tokens
    (``contiguous``: stop at the first that does not fit; else skip it and try the next)."""
    base = count_message_tokens([SystemMessage(""), question])
    kept: list[str] = []
    chars = 0
    for line in lines:
        extra = len(line) + (1 if kept else 0)
        if base + math.ceil((chars + extra) / CHARS_PER_TOKEN) > budget:
            if contiguous:
                break
            continue
        kept.append(line)
        chars += extra
    return [SystemMessage("\n".join(kept)), question]


def baseline_prompts(chat: ChatImport, question: HumanMessage, budget: int, bm25: BM25 | None = None) -> dict[str, list[BaseMessage]]:
    lines = [turn_line(m) for m in chat.messages]
    newest = _fit(list(reversed(lines)), question, budget, contiguous=True)[0].text
    bm25 = bm25 or BM25([m.text for m in chat.messages])
    ranked = [lines[i] for i in bm25.ranked(question.text)]
    return {
        "whole_history": [SystemMessage("\n".join(lines)), question],
        "recent": [SystemMessage("\n".join(reversed(newest.split("\n"))) if newest else ""), question],
        "bm25_turns": _fit(ranked, question, budget),
    }


@dataclass
class TurnIndex:
    """BM25 over a chat's messages that the model does not already see (bm25_excerpts' search)."""

    thread_id: str
    title: str
    lines: list[ExcerptLine]
    bm25: BM25

    @classmethod
    def of(cls, thread_id: str, title: str, messages: list[BaseMessage], in_view: set[str]) -> "TurnIndex":
        lines = [
            ExcerptLine(message_id=m.id, position=p, role=role, sent_at=sent_at(m).isoformat(), text=m.text)
            for p, role, m in conversation(messages)
            if m.id not in in_view and sent_at(m) is not None
        ]
        return cls(thread_id, title, lines, BM25([l["text"] for l in lines]))

    def ranked(self, question: str, cap: int) -> list[Excerpt]:
        """Plain BM25 turns as excerpts, best first, enough to fill ``cap`` tokens (the prompt packs them)."""
        out, cost = [], 0
        for i in self.bm25.ranked(question):
            piece = Excerpt(thread_id=self.thread_id, chat_title=self.title, score=0.0, lines=[self.lines[i]])
            out.append(piece)
            cost += count_tokens(render_excerpt(piece))
            if cost > cap:
                break
        return out


def bm25_excerpts_prompt(state: State, ctx: Context, index: TurnIndex, question: str) -> BuiltPrompt:
    """The memory-agent's prompt for ``state`` (system, summary, recent conversation, the same total
    budget) with what memory found replaced by plain BM25 turns packed as excerpts."""
    loaded = LoadedContext(excerpts=index.ranked(question, ctx.episodic_token_budget))
    built, _ = reply_prompt(replace(state, loaded_context=loaded, retrieved_chunks=[]), ctx)
    return built


