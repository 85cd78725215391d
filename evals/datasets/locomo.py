"""LoCoMo loader (snap-research/LoCoMo ``locomo10.json`` format).

Default file: ``<evaldata>/locomo7.json`` (the first 7 of LoCoMo's 10
conversations). Each sample becomes one ``Conversation``:

* sessions: every ``session_N`` key, sorted by N, dated by
  ``session_N_date_time``. (Some samples carry more ``session_N_date_time``
  keys than sessions; the extra dates are ignored.)
* turns: ``speaker``, ``text``, ``turn_id`` = LoCoMo ``dia_id`` ("D3:12").
  Shared images: with ``image_captions=True`` (default) the BLIP caption is
  appended to the text as ``"<text> [shared <caption>]"`` (LoCoMo's own QA
  prompts add "and shared <caption>"; some gold evidence is only in the image).
  The raw caption, image URL and search query stay in ``turn.metadata``.
* probes: ``qa``. Integer answers become strings. Category 5 (adversarial)
  items usually have no ``answer``, only ``adversarial_answer`` (the tempting
  wrong answer); their ``answer`` is set to ``ADVERSARIAL_ANSWER`` ("Not
  mentioned in the conversation"). Two category-5 items do carry an answer
  ("No"); it is kept. ``question_id`` is ``locomo_<sample index>_qa<qa index>``
  (0-based, the ids used by the locomo-audit file). Malformed evidence ids are
  repaired ("D8:6; D9:17" is split, "D:11:26" becomes "D11:26", a bare "D" is
  dropped); the raw list is kept in ``metadata['raw_evidence']`` when changed.
* session_summaries: ``session_summary`` (``session_N_summary``). LoCoMo has no
  whole-conversation reference, so ``reference_summaries`` is empty.
* gold_facts: ``observation`` (``session_N_observation`` -> speaker -> [[fact,
  dia_id]]). Nine facts cite several dia_ids (eight as a list, one as a
  comma-joined string): ``turn_id`` is the first, ``metadata['turn_ids']`` has all.
* metadata: speaker_a, speaker_b, sample_index, event_summary, audit counts.

Audit corrections (``audit=True`` by default): ``locomo_audit_errors.json``
(dial481/locomo-audit) lists QA items whose gold answer or evidence is wrong.
Each entry has ``question_id``, ``question``, ``category``, ``golden_answer``,
``correct_answer``, ``cited_evidence``, ``correct_evidence``, ``error_type``
(WRONG_CITATION, HALLUCINATION, TEMPORAL_ERROR, ATTRIBUTION_ERROR, AMBIGUOUS,
INCOMPLETE) and ``reasoning``. For each entry whose error type is in
``audit_error_types`` (default: all) and whose question text matches, the
probe's ``evidence`` becomes ``correct_evidence`` and, unless the error is a
WRONG_CITATION, its ``answer`` becomes ``correct_answer``: a wrong citation's
answer is right by the audit's own verdict, and its ``correct_answer`` is often
that verdict in words ("December 2022 (answer is correct, citation is wrong)",
"The golden answer is factually correct; only the citation D4:36 is invalid."),
which no prompt or reply holds. So the file corrects the 99 answers it finds
wrong, and the citations of the rest. The originals go to
``metadata['original_answer']`` / ``['original_evidence']`` and the entry's
type and reasoning to ``metadata['audit']``. Beware: some corrected answers are
explanatory sentences rather than short answers, which lowers token-F1 for any
short prediction; pass ``audit_error_types={'WRONG_CITATION'}`` to fix evidence
only, or ``audit=False`` to score against the original gold (comparable with
published LoCoMo numbers). When the default audit file is absent, loading
proceeds without it; an explicit ``audit_path`` that does not exist is an
error.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ._jsonl import read_json
from .paths import DatasetNotFoundError, evaldata_dir, resolve_data_file
from .schema import ADVERSARIAL_ANSWER, Conversation, GoldFact, Probe, Session, Turn

__all__ = ["DEFAULT_FILE", "AUDIT_FILE", "load_locomo", "load_locomo_audit", "parse_locomo"]

log = logging.getLogger(__name__)

DEFAULT_FILE = "locomo7.json"
AUDIT_FILE = "locomo_audit_errors.json"

_SESSION_RE = re.compile(r"session_(\d+)")
_NUM_RE = re.compile(r"(\d+)")


def _clean_evidence(raw: list[Any]) -> list[str]:
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            part = part.strip()
            if not part:
                continue
            m = re.fullmatch(r"D:?(\d+):(\d+)", part)
            if m:
                out.append(f"D{m.group(1)}:{m.group(2)}")
    return out


def _session_number(key: str) -> int | None:
    m = _NUM_RE.search(key)
    return int(m.group(1)) if m else None


def _turn(raw: dict[str, Any], image_captions: bool) -> Turn:
    text = str(raw.get("text", ""))
    meta = {k: raw[k] for k in ("blip_caption", "img_url", "query", "re-download") if k in raw}
    caption = raw.get("blip_caption")
    if image_captions and caption:
        text = f"{text} [shared {caption}]".strip()
    return Turn(speaker=str(raw["speaker"]), text=text, turn_id=raw.get("dia_id"), metadata=meta)


def _probe(raw: dict[str, Any], question_id: str) -> Probe:
    category = int(raw["category"])
    answer = raw.get("answer")
    if answer is None:
        answer = ADVERSARIAL_ANSWER if category == 5 else ""
    raw_evidence = list(raw.get("evidence") or [])
    evidence = _clean_evidence(raw_evidence)
    meta: dict[str, Any] = {}
    if evidence != raw_evidence:
        meta["raw_evidence"] = raw_evidence
    adv = raw.get("adversarial_answer")
    return Probe(
        question=str(raw["question"]),
        answer=str(answer),
        category=category,
        evidence=evidence,
        question_id=question_id,
        adversarial_answer=None if adv is None else str(adv),
        metadata=meta,
    )


def _gold_facts(observation: dict[str, Any]) -> list[GoldFact]:
    facts: list[GoldFact] = []
    for key in sorted(observation, key=lambda k: _session_number(k) or 0):
        session = _session_number(key)
        for speaker, items in (observation[key] or {}).items():
            for item in items:
                if isinstance(item, str):
                    text, ids = item, []
                else:
                    text = str(item[0])
                    ref = item[1] if len(item) > 1 else []
                    ids = _clean_evidence(ref if isinstance(ref, list) else [ref])
                meta = {"turn_ids": ids} if len(ids) > 1 else {}
                facts.append(
                    GoldFact(
                        text=text,
                        speaker=speaker,
                        session=session,
                        turn_id=ids[0] if ids else None,
                        metadata=meta,
                    )
                )
    return facts


def parse_locomo(
    samples: list[dict[str, Any]],
    *,
    image_captions: bool = True,
    audit_entries: list[dict[str, Any]] | None = None,
    audit_error_types: Collection[str] | None = None,
    limit: int | None = None,
) -> list[Conversation]:
    """Convert already-loaded LoCoMo samples (see module docstring)."""
    audit_by_id: dict[str, dict[str, Any]] = {}
    for entry in audit_entries or []:
        if audit_error_types is None or entry.get("error_type") in audit_error_types:
            audit_by_id[str(entry["question_id"])] = entry

    conversations: list[Conversation] = []
    for sample_index, sample in enumerate(samples):
        if limit is not None and len(conversations) >= limit:
            break
        conv = sample["conversation"]
        numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_RE.fullmatch(k)))
        sessions = [
            Session(
                index=n,
                date=conv.get(f"session_{n}_date_time"),
                turns=[_turn(t, image_captions) for t in conv[f"session_{n}"] or []],
            )
            for n in numbers
        ]
        probes = [_probe(q, f"locomo_{sample_index}_qa{i}") for i, q in enumerate(sample.get("qa", []))]

        applied = 0
        if audit_by_id:
            for probe in probes:
                entry = audit_by_id.get(probe.question_id or "")
                if entry is None:
                    continue
                if str(entry.get("question", "")).strip() != probe.question.strip():
                    log.warning("locomo audit %s: question text differs, not applied", probe.question_id)
                    continue
                probe.metadata["original_answer"] = probe.answer
                probe.metadata["original_evidence"] = list(probe.evidence)
                probe.metadata["audit"] = {
                    "error_type": entry.get("error_type"),
                    "reasoning": entry.get("reasoning"),
                }
                if entry.get("error_type") != "WRONG_CITATION":
                    probe.answer = str(entry.get("correct_answer", probe.answer))
                probe.evidence = _clean_evidence(list(entry.get("correct_evidence") or probe.evidence))
                applied += 1

        summaries = {
            n: str(text)
            for key, text in (sample.get("session_summary") or {}).items()
            if (n := _session_number(key)) is not None and text
        }
        conversations.append(
            Conversation(
                id=str(sample.get("sample_id") or f"locomo-{sample_index}"),
                sessions=sessions,
                probes=probes,
                reference_summaries=[],
                session_summaries=summaries,
                gold_facts=_gold_facts(sample.get("observation") or {}),
                source="locomo",
                metadata={
                    "speaker_a": conv.get("speaker_a"),
                    "speaker_b": conv.get("speaker_b"),
                    "sample_index": sample_index,
                    "event_summary": sample.get("event_summary") or {},
                    "audit_corrections_applied": applied,
                },
            )
        )
    return conversations


def load_locomo_audit(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The audit entries (list of dicts); raises ``DatasetNotFoundError`` if missing."""
    p = resolve_data_file(path, AUDIT_FILE, "LoCoMo audit corrections")
    data = read_json(p)
    if not isinstance(data, list):
        raise ValueError(f"{p}: expected a JSON list of audit entries")
    return data


def load_locomo(
    path: str | os.PathLike[str] | None = None,
    *,
    limit: int | None = None,
    audit: bool = True,
    audit_path: str | os.PathLike[str] | None = None,
    audit_error_types: Collection[str] | None = None,
    image_captions: bool = True,
) -> list[Conversation]:
    """Load LoCoMo conversations; see the module docstring for every conversion rule.

    ``path`` defaults to ``<evaldata>/locomo7.json``. With ``audit`` the
    corrections file is looked up next to the data file when ``audit_path``
    is not given (missing there: no corrections, logged at INFO).
    """
    p = resolve_data_file(path, DEFAULT_FILE, "LoCoMo")
    samples = read_json(p)
    if not isinstance(samples, list):
        raise ValueError(f"{p}: expected a JSON list of LoCoMo samples")

    entries: list[dict[str, Any]] | None = None
    if audit:
        if audit_path is not None:
            entries = load_locomo_audit(audit_path)
        else:
            candidates = [Path(p).parent / AUDIT_FILE, evaldata_dir() / AUDIT_FILE]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                log.info("LoCoMo audit file not found (looked at %s); loading uncorrected", candidates)
            else:
                try:
                    entries = load_locomo_audit(found)
                except DatasetNotFoundError:  # pragma: no cover - raced deletion
                    entries = None
    return parse_locomo(
        samples,
        image_captions=image_captions,
        audit_entries=entries,
        audit_error_types=audit_error_types,
        limit=limit,
    )
