"""Our own small dataset: ``evals/data/builtin_conversations.json``.

Four multi-session user/assistant conversations written for this project
(moving to Lisbon, learning Italian, debugging Postgres, marathon training):
2-3 sessions of 14-20 turns each, 8 probes per conversation (LoCoMo categories
1-4 plus one adversarial category 5), a reference summary per session and for
the whole conversation, and gold facts about the user with their turn ids.
The JSON stores ``Conversation`` objects directly (``{"conversations": [...]}``),
so any file in that shape can be loaded with ``load_conversations_json``.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from ._jsonl import read_json
from .paths import DatasetNotFoundError
from .schema import Conversation

__all__ = ["BUILTIN_FILE", "builtin_path", "load_builtin", "load_conversations_json", "parse_conversations"]

BUILTIN_FILE = "builtin_conversations.json"


def builtin_path() -> Path:
    """Path of the packaged builtin JSON file."""
    return Path(str(resources.files("evals.data").joinpath(BUILTIN_FILE)))


def parse_conversations(data: Any, *, limit: int | None = None, default_source: str = "custom") -> list[Conversation]:
    """Validate ``{"conversations": [...]}`` or a bare list of conversation dicts."""
    items = data.get("conversations") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError("expected a list of conversations or an object with a 'conversations' list")
    if limit is not None:
        items = items[:limit]
    out = []
    for item in items:
        if isinstance(item, dict) and "source" not in item:
            item = {**item, "source": default_source}
        out.append(Conversation.model_validate(item))
    return out


def load_conversations_json(
    path: str | os.PathLike[str], *, limit: int | None = None, default_source: str = "custom"
) -> list[Conversation]:
    """Load a JSON file already in our schema."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DatasetNotFoundError(f"conversations file not found at {p.resolve()}")
    data = read_json(p)
    return parse_conversations(data, limit=limit, default_source=default_source)


def load_builtin(path: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Conversation]:
    """Load the builtin conversations (or another file in the same format)."""
    return load_conversations_json(path or builtin_path(), limit=limit, default_source="builtin")
