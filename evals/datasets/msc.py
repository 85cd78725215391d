"""Multi-Session Chat (MSC) persona-summary loader.

File: ``msc/msc_personasummary_session_1_test.jsonl`` (ParlAI MSC v0.1,
session 1 = the original PersonaChat dialogue). Each line:

* ``dialog``: turns with ``id`` (speaker: ``bot_0`` / ``bot_1``, alternating),
  ``text``, ``convai2_id``, optional ``persona_text`` (the persona sentence(s)
  this turn expresses: about 70 % of turns have one), ``agg_persona_list``
  (all persona sentences of that speaker so far) and sometimes
  ``problem_data`` (crowd-work bookkeeping).
* ``init_personachat.init_personas``: the two original 5-line PersonaChat
  profiles (the speakers' hidden personas), ``followup`` (a question opening the
  next session), ``newfact`` (a fact for the next session), ``initial_data_id``.

``persona_text`` can hold several sentences; they are exactly the items that
``agg_persona_list`` gains at that turn, so each new item becomes one
``GoldFact`` (speaker, session 1, that turn's id). Turn ids are ``D1:<n>``.
The dialogue id is ``initial_data_id``. No probes, no reference summaries;
``init_personas``, ``followup`` and ``newfact`` go to ``metadata``.
"""

from __future__ import annotations

import os
from typing import Any

from ._jsonl import iter_jsonl
from .paths import resolve_data_file
from .schema import Conversation, GoldFact, Session, Turn

__all__ = ["DEFAULT_FILE", "load_msc", "parse_msc_record"]

DEFAULT_FILE = "msc/msc_personasummary_session_1_test.jsonl"


def parse_msc_record(rec: dict[str, Any], index: int = 0) -> Conversation:
    turns: list[Turn] = []
    facts: list[GoldFact] = []
    seen: dict[str, list[str]] = {}
    for i, raw in enumerate(rec.get("dialog") or [], 1):
        speaker = str(raw.get("id", ""))
        turn_id = f"D1:{i}"
        turns.append(Turn(speaker=speaker, text=str(raw.get("text", "")), turn_id=turn_id))
        previous = seen.get(speaker, [])
        agg = [str(x) for x in raw.get("agg_persona_list") or []]
        persona_text = raw.get("persona_text")
        if persona_text:
            new = [x for x in agg if x not in previous]
            if not new:  # persona repeated: fall back to the raw text
                new = [str(persona_text).strip()]
            facts.extend(GoldFact(text=x, speaker=speaker, session=1, turn_id=turn_id) for x in new)
        if agg:
            seen[speaker] = agg
    init = (rec.get("init_personachat") or {}).get("init_personas") or []
    return Conversation(
        id=str(rec.get("initial_data_id") or f"msc-{index}"),
        sessions=[Session(index=1, date=None, turns=turns)],
        gold_facts=facts,
        source="msc",
        metadata={
            "init_personas": {f"bot_{i}": list(p) for i, p in enumerate(init)},
            "followup": rec.get("followup"),
            "newfact": rec.get("newfact"),
        },
    )


def load_msc(path: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Conversation]:
    """Load MSC session-1 dialogues with per-turn persona facts."""
    p = resolve_data_file(path, DEFAULT_FILE, "MSC")
    return [parse_msc_record(rec, i) for i, rec in enumerate(iter_jsonl(p, limit))]
