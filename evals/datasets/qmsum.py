"""QMSum loader (``qmsum_all_test.jsonl``).

Each line is one meeting: ``meeting_transcripts`` ([{speaker, content}]),
``topic_list`` ([{topic, relevant_text_span}]), ``general_query_list``
([{query, answer}]) and ``specific_query_list`` ([{query, answer,
relevant_text_span}]). Meetings have no id; we use ``qmsum-<line index>``.

* The whole meeting is one undated session; transcript entry ``i`` (0-based)
  becomes turn ``D1:<i+1>``. Transcripts are pre-tokenised ("I 'm", "it ,").
* Every query becomes a ``Probe`` with category 0 (free-form, not a LoCoMo
  category) and ``metadata['kind']`` = ``general`` or ``specific``. Answers
  are long abstractive summaries: score them with ROUGE rather than token F1.
* ``relevant_text_span`` pairs are 0-based inclusive transcript indexes
  (strings); they are expanded to turn ids in ``evidence`` and kept raw in
  ``metadata['relevant_text_span']``.
* General queries that ask for an overall summary ("Summarize the whole
  meeting", "What was the overall/general discussion...", "What were the
  topics...") also provide ``reference_summaries``; decision questions do not.
* Topics (with spans) are in ``metadata['topics']``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ._jsonl import iter_jsonl
from .paths import resolve_data_file
from .schema import Conversation, Probe, Session, Turn

__all__ = ["DEFAULT_FILE", "load_qmsum", "parse_qmsum_record", "is_summary_query"]

DEFAULT_FILE = "qmsum/qmsum_all_test.jsonl"

_SUMMARY_QUERY_RE = re.compile(r"summar|overall discussion|general discussion|topics", re.IGNORECASE)


def is_summary_query(query: str) -> bool:
    """True for general queries that ask for a summary of the whole meeting."""
    return bool(_SUMMARY_QUERY_RE.search(query))


def _span_ids(spans: list[Any], n_turns: int) -> list[str]:
    ids: list[str] = []
    for span in spans or []:
        try:
            start, end = int(span[0]), int(span[-1])
        except (TypeError, ValueError, IndexError):
            continue
        for i in range(max(0, start), min(end, n_turns - 1) + 1):
            tid = f"D1:{i + 1}"
            if tid not in ids:
                ids.append(tid)
    return ids


def parse_qmsum_record(rec: dict[str, Any], index: int = 0) -> Conversation:
    transcript = rec.get("meeting_transcripts") or []
    turns = [
        Turn(speaker=str(t.get("speaker", "")), text=str(t.get("content", "")), turn_id=f"D1:{i + 1}")
        for i, t in enumerate(transcript)
    ]
    probes: list[Probe] = []
    references: list[str] = []
    for q in rec.get("general_query_list") or []:
        probes.append(Probe(question=str(q["query"]), answer=str(q["answer"]), category=0, metadata={"kind": "general"}))
        if is_summary_query(str(q["query"])):
            references.append(str(q["answer"]))
    for q in rec.get("specific_query_list") or []:
        spans = q.get("relevant_text_span") or []
        probes.append(
            Probe(
                question=str(q["query"]),
                answer=str(q["answer"]),
                category=0,
                evidence=_span_ids(spans, len(turns)),
                metadata={"kind": "specific", "relevant_text_span": spans},
            )
        )
    for i, p in enumerate(probes):
        p.question_id = f"qmsum-{index}-q{i}"
    return Conversation(
        id=f"qmsum-{index}",
        sessions=[Session(index=1, date=None, turns=turns)],
        probes=probes,
        reference_summaries=references,
        source="qmsum",
        metadata={"topics": rec.get("topic_list") or []},
    )


def load_qmsum(path: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Conversation]:
    """Load QMSum meetings (default ``<evaldata>/qmsum/qmsum_all_test.jsonl``)."""
    p = resolve_data_file(path, DEFAULT_FILE, "QMSum")
    return [parse_qmsum_record(rec, i) for i, rec in enumerate(iter_jsonl(p, limit))]
