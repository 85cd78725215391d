"""The one in-memory shape every eval dataset is converted to.

``Conversation`` → ``Session`` → ``Turn``, plus the things to score against:
``Probe`` (question + gold answer, LoCoMo categories), reference summaries
(whole conversation and per session) and ``GoldFact`` (facts a memory should
have extracted). Fields a source does not have stay empty.

Turn ids follow LoCoMo's ``D<session>:<n>`` (1-based ``n``) everywhere: LoCoMo
keeps its own ``dia_id``; the other loaders generate them. Probe evidence and
gold-fact ``turn_id`` point at these ids.

Probe categories (LoCoMo's numbering, see ``CATEGORY_NAMES``): 1 multi-hop,
2 temporal, 3 open-domain/commonsense, 4 single-hop, 5 adversarial (the right
answer is a refusal), and 0 for free-form questions from non-LoCoMo sources
(e.g. QMSum queries).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CATEGORY_NAMES",
    "ADVERSARIAL_ANSWER",
    "Turn",
    "Session",
    "Probe",
    "GoldFact",
    "Conversation",
]

CATEGORY_NAMES: dict[int, str] = {
    0: "free-form",
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

#: Gold answer we store for adversarial (category 5) probes without one.
ADVERSARIAL_ANSWER = "Not mentioned in the conversation"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Turn(_Model):
    speaker: str
    text: str
    turn_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def render(self) -> str:
        return f"{self.speaker}: {self.text}"


class Session(_Model):
    index: int  # 1-based, as in LoCoMo's session_N
    date: str | None = None  # free text as the source gives it (LoCoMo: "1:56 pm on 8 May, 2023")
    turns: list[Turn] = Field(default_factory=list)

    def transcript(self, include_date: bool = True) -> str:
        lines = [t.render() for t in self.turns]
        if include_date and self.date:
            lines.insert(0, f"[Session {self.index} - {self.date}]")
        return "\n".join(lines)


class Probe(_Model):
    question: str
    answer: str
    category: int = Field(ge=0, le=5)
    evidence: list[str] = Field(default_factory=list)  # turn ids
    question_id: str | None = None
    adversarial_answer: str | None = None  # category 5: the tempting wrong answer
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_to_str(cls, v: Any) -> Any:
        # LoCoMo has integer answers (e.g. 2022, 3)
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v

    @property
    def category_name(self) -> str:
        return CATEGORY_NAMES[self.category]


class GoldFact(_Model):
    text: str
    speaker: str | None = None
    session: int | None = None
    turn_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Conversation(_Model):
    id: str
    sessions: list[Session]
    probes: list[Probe] = Field(default_factory=list)
    reference_summaries: list[str] = Field(default_factory=list)  # whole-conversation references
    session_summaries: dict[int, str] = Field(default_factory=dict)  # session index -> reference
    gold_facts: list[GoldFact] = Field(default_factory=list)
    source: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    # --- turns -----------------------------------------------------------
    def all_turns(self) -> list[Turn]:
        """Every turn of every session, in order."""
        return [t for s in self.sessions for t in s.turns]

    def iter_turns(self) -> Iterator[tuple[Session, Turn]]:
        """``(session, turn)`` pairs in order."""
        for s in self.sessions:
            for t in s.turns:
                yield s, t

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def turn(self, turn_id: str) -> Turn | None:
        """The turn with this id, or ``None``."""
        return next((t for t in self.all_turns() if t.turn_id == turn_id), None)

    def session(self, index: int) -> Session:
        for s in self.sessions:
            if s.index == index:
                return s
        raise KeyError(f"conversation {self.id!r} has no session {index}")

    @property
    def speakers(self) -> list[str]:
        """Distinct speakers in order of first appearance."""
        seen: dict[str, None] = {}
        for t in self.all_turns():
            seen.setdefault(t.speaker, None)
        return list(seen)

    def transcript(self, include_dates: bool = True) -> str:
        """All sessions rendered as ``speaker: text`` lines, sessions separated by a blank line."""
        return "\n\n".join(s.transcript(include_dates) for s in self.sessions)

    # --- gold data -------------------------------------------------------
    def probes_by_category(self, *categories: int) -> list[Probe]:
        """Probes in the given categories (all probes when none given)."""
        if not categories:
            return list(self.probes)
        return [p for p in self.probes if p.category in categories]

    def facts_for(self, speaker: str | None = None, session: int | None = None) -> list[GoldFact]:
        """Gold facts, optionally filtered by speaker and/or session."""
        return [
            f
            for f in self.gold_facts
            if (speaker is None or f.speaker == speaker) and (session is None or f.session == session)
        ]

    def check(self) -> list[str]:
        """Consistency problems (dangling evidence / fact ids, duplicate turn ids, ...); [] when clean."""
        problems: list[str] = []
        ids = [t.turn_id for t in self.all_turns() if t.turn_id]
        if len(ids) != len(set(ids)):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            problems.append(f"duplicate turn ids: {dupes[:10]}")
        known = set(ids)
        indexes = [s.index for s in self.sessions]
        if len(indexes) != len(set(indexes)):
            problems.append(f"duplicate session indexes: {indexes}")
        for p in self.probes:
            missing = [e for e in p.evidence if e not in known]
            if missing:
                problems.append(f"probe {p.question!r}: unknown evidence {missing}")
        for f in self.gold_facts:
            if f.turn_id and f.turn_id not in known:
                problems.append(f"fact {f.text!r}: unknown turn id {f.turn_id}")
            if f.session is not None and f.session not in indexes:
                problems.append(f"fact {f.text!r}: unknown session {f.session}")
        extra = sorted(set(self.session_summaries) - set(indexes))
        if extra:
            problems.append(f"session summaries for unknown sessions: {extra}")
        return problems

    def first_sessions(self, n: int) -> Conversation:
        """The conversation cut after its first ``n`` sessions, with only the gold data the kept part supports.

        Kept: probes whose evidence turns all lie in the kept sessions (a probe
        without evidence is dropped: nothing says the kept part answers it), gold
        facts of kept sessions or turns, session summaries of kept sessions.
        Whole-conversation reference summaries are dropped (they describe the
        parts that were cut). A conversation with at most ``n`` sessions is
        returned unchanged.
        """
        if n < 1:
            raise ValueError("n must be at least 1")
        if len(self.sessions) <= n:
            return self
        sessions = self.sessions[:n]
        kept_turns = {t.turn_id for s in sessions for t in s.turns if t.turn_id}
        kept_indexes = {s.index for s in sessions}
        return self.model_copy(
            update={
                "sessions": sessions,
                "probes": [p for p in self.probes if p.evidence and all(e in kept_turns for e in p.evidence)],
                "reference_summaries": [],
                "session_summaries": {k: v for k, v in self.session_summaries.items() if k in kept_indexes},
                "gold_facts": [
                    f for f in self.gold_facts if (f.turn_id in kept_turns if f.turn_id else f.session in kept_indexes)
                ],
                "metadata": {**self.metadata, "sessions_kept": n, "sessions_total": len(self.sessions)},
            }
        )

    def evidence_turns(self, probe: Probe) -> list[Turn]:
        """The turns a probe's evidence ids point at (unknown ids skipped)."""
        return [t for e in probe.evidence if (t := self.turn(e)) is not None]
