"""DialogSum loader (``dialogsum.test.jsonl``).

Each line: ``fname``, ``dialogue`` (newline-separated ``#Person1#: ...``
lines), ``summary1..3`` and ``topic1..3``. One ``Conversation`` per line with
a single undated session; speakers keep DialogSum's literal names
(``#Person1#``) because the reference summaries refer to them that way. A line
that does not start with a ``#Name#:`` tag is appended to the previous turn.
``reference_summaries`` = the three summaries; topics are in ``metadata``. No
probes, no gold facts.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ._jsonl import iter_jsonl
from .paths import resolve_data_file
from .schema import Conversation, Session, Turn

__all__ = ["DEFAULT_FILE", "load_dialogsum", "parse_dialogsum_record", "split_dialogue"]

DEFAULT_FILE = "dialogsum/dialogsum.test.jsonl"

_TAG_RE = re.compile(r"^\s*(#[^#]+#)\s*:?\s*(.*)$")


def split_dialogue(dialogue: str) -> list[tuple[str, str]]:
    """``[(speaker, text), ...]`` from a DialogSum dialogue string."""
    turns: list[tuple[str, str]] = []
    for line in dialogue.splitlines():
        if not line.strip():
            continue
        m = _TAG_RE.match(line)
        if m:
            turns.append((m.group(1), m.group(2).strip()))
        elif turns:
            speaker, text = turns[-1]
            turns[-1] = (speaker, f"{text} {line.strip()}".strip())
        else:
            turns.append(("unknown", line.strip()))
    return turns


def parse_dialogsum_record(rec: dict[str, Any], index: int = 0) -> Conversation:
    turns = [
        Turn(speaker=s, text=t, turn_id=f"D1:{i}")
        for i, (s, t) in enumerate(split_dialogue(str(rec.get("dialogue", ""))), 1)
    ]
    summaries = [str(rec[k]) for k in sorted(rec) if re.fullmatch(r"summary\d*", k) and rec[k]]
    topics = [str(rec[k]) for k in sorted(rec) if re.fullmatch(r"topic\d*", k) and rec[k]]
    return Conversation(
        id=str(rec.get("fname") or rec.get("id") or f"dialogsum-{index}"),
        sessions=[Session(index=1, date=None, turns=turns)],
        reference_summaries=summaries,
        source="dialogsum",
        metadata={"topics": topics},
    )


def load_dialogsum(path: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Conversation]:
    """Load DialogSum dialogues (default ``<evaldata>/dialogsum/dialogsum.test.jsonl``)."""
    p = resolve_data_file(path, DEFAULT_FILE, "DialogSum")
    return [parse_dialogsum_record(rec, i) for i, rec in enumerate(iter_jsonl(p, limit))]
