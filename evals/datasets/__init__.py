"""Eval dataset loaders; every loader returns ``list[Conversation]`` (see ``schema``).

``load_dataset(name_or_path, limit=None, **options)`` accepts a registered
name (``builtin``, ``locomo``, ``dialogsum``, ``qmsum``, ``msc``) or a path to
a file in one of those formats (detected from extension and content). Third-
party data is read from ``<repo>/../shared/evaldata`` (or
``$MEMORY_AGENT_EVALDATA``) and is never copied into the repo.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._jsonl import iter_jsonl, read_json
from .builtin import builtin_path, load_builtin, load_conversations_json, parse_conversations
from .dialogsum import load_dialogsum
from .locomo import load_locomo
from .msc import load_msc
from .paths import EVALDATA_ENV, DatasetNotFoundError, evaldata_dir
from .qmsum import load_qmsum
from .schema import ADVERSARIAL_ANSWER, CATEGORY_NAMES, Conversation, GoldFact, Probe, Session, Turn

__all__ = [
    "ADVERSARIAL_ANSWER",
    "CATEGORY_NAMES",
    "DATASETS",
    "EVALDATA_ENV",
    "Conversation",
    "DatasetNotFoundError",
    "GoldFact",
    "Probe",
    "Session",
    "Turn",
    "builtin_path",
    "detect_format",
    "evaldata_dir",
    "load_builtin",
    "load_conversations_json",
    "load_dataset",
    "load_dialogsum",
    "load_locomo",
    "load_msc",
    "load_qmsum",
    "parse_conversations",
]

Loader = Callable[..., list[Conversation]]

#: name -> loader(path=None, *, limit=None, **options)
DATASETS: dict[str, Loader] = {
    "builtin": load_builtin,
    "locomo": load_locomo,
    "dialogsum": load_dialogsum,
    "qmsum": load_qmsum,
    "msc": load_msc,
}


def _first_jsonl_record(path: Path) -> dict[str, Any]:
    rec = next(iter_jsonl(path, limit=1), None)
    if isinstance(rec, dict):
        return rec
    raise ValueError(f"{path}: no JSON object on the first non-empty line")


def detect_format(path: str | os.PathLike[str]) -> str:
    """Which registered format a file is in (``locomo``, ``dialogsum``, ..., ``conversations``).

    ``conversations`` means a JSON file already in our schema (like the builtin one).
    Raises ``ValueError`` when the content matches nothing known.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        rec = _first_jsonl_record(p)
        if "dialogue" in rec and any(k.startswith("summary") for k in rec):
            return "dialogsum"
        if "meeting_transcripts" in rec:
            return "qmsum"
        if "dialog" in rec and isinstance(rec["dialog"], list):
            return "msc"
        raise ValueError(f"{p}: unrecognised JSONL record keys {sorted(rec)[:12]}")
    if suffix == ".json":
        data = read_json(p)
        first = data[0] if isinstance(data, list) and data else None
        if isinstance(first, dict) and "conversation" in first and "qa" in first:
            return "locomo"
        if isinstance(data, dict) and isinstance(data.get("conversations"), list):
            return "conversations"
        if isinstance(first, dict) and "sessions" in first:
            return "conversations"
        raise ValueError(f"{p}: unrecognised JSON content (not LoCoMo, not our conversation schema)")
    raise ValueError(f"{p}: unsupported extension {suffix!r}; expected .json or .jsonl")


def load_dataset(name_or_path: str | os.PathLike[str], limit: int | None = None, **options: Any) -> list[Conversation]:
    """Load a dataset by registered name or by file path.

    ``limit`` keeps the first N conversations. Extra keyword ``options`` go
    to the loader (e.g. ``audit=False`` or ``image_captions=False`` for
    LoCoMo). Raises ``DatasetNotFoundError`` (a ``FileNotFoundError``) saying
    where it looked when a file is missing, ``ValueError`` for an unknown name
    or an unrecognised file.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0 or None")
    key = str(name_or_path)
    if key.lower() in DATASETS:
        return DATASETS[key.lower()](None, limit=limit, **options)
    p = Path(key).expanduser()
    if not p.exists():
        looks_like_path = p.suffix.lower() in {".json", ".jsonl"} or os.sep in key or "/" in key
        if looks_like_path:
            raise DatasetNotFoundError(f"dataset file not found at {p.resolve()}")
        raise ValueError(
            f"unknown dataset {key!r}: not one of {sorted(DATASETS)} and no file at {p.resolve()}"
        )
    if p.is_dir():
        raise ValueError(f"{p.resolve()} is a directory; pass a .json or .jsonl file")
    fmt = detect_format(p)
    if fmt == "conversations":
        return load_conversations_json(p, limit=limit, **options)
    return DATASETS[fmt](p, limit=limit, **options)
