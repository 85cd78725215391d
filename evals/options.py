"""Options the eval commands share: those of a variant comparison, and the compaction settings a run may override."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.context import Context

__all__ = ["CompactionOverrides", "ComparisonOptions", "compaction_settings"]


@dataclass(kw_only=True)
class ComparisonOptions:
    """What the commands comparing variants in LangSmith experiments (summaries, extraction) all take."""

    variants: list[str]
    dataset: str = "builtin"
    limit: int | None = None
    out: Path | None = None
    database_url: str | None = None
    experiment_prefix: str
    seed: int = 0  # of the bootstrap
    upload: bool | None = None  # None: upload when LANGSMITH_API_KEY is set
    progress: bool = True


@dataclass
class CompactionOverrides:
    """``--window``, ``--tail``, ``--max-context-tokens``, ``--max-summary-tokens``; None keeps Context's default."""

    window: int | None = None
    tail: int | None = None
    max_context_tokens: int | None = None
    max_summary_tokens: int | None = None

    def context(self, user_id: str, **fields: Any) -> Context:
        """The run's Context: these overrides over the defaults, plus ``fields``."""
        defaults = Context()
        return Context(
            user_id=user_id,
            summary_window=self.window or defaults.summary_window,
            tail_size=self.tail or defaults.tail_size,
            max_context_tokens=self.max_context_tokens or defaults.max_context_tokens,
            max_summary_tokens=self.max_summary_tokens or defaults.max_summary_tokens,
            **fields,
        )


def compaction_settings(ctx: Context) -> dict[str, int]:
    """The compaction settings a run used, as its results record them."""
    return {
        "summary_window": ctx.summary_window,
        "tail_size": ctx.tail_size,
        "max_context_tokens": ctx.max_context_tokens,
        "max_summary_tokens": ctx.max_summary_tokens,
    }
