"""What the rules build: the result of one message, checked against the memories already stored,
and the registry the rules add themselves to (in the order their modules are imported)."""

from __future__ import annotations

import re
from typing import Any, Callable

from pydantic import ValidationError

from core.text_validation import LIST_ITEMS
from core.words import third_person
from core.schemas import (
    ExtractionResult,
    NewFact,
    PreferenceUpdates,
    ProfileUpdates,
    TaskUpdate,
    normalize_text,
)
from offline_model.rules.vocabulary import (
    _content_words,
)

# --------------------------------------------------------------------------- stored memories
def _stored_list(stored: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    if not isinstance(stored, dict):
        return []
    items = stored.get(key) or []
    if isinstance(items, dict):
        items = list(items.values())
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out.append(item)
        elif isinstance(item, str):
            out.append({"text": item, "description": item})
    return out


def _active_facts(stored: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        f
        for f in _stored_list(stored, "facts")
        if isinstance(f.get("text"), str) and f.get("status", "active") == "active" and not f.get("superseded_by")
    ]


def _open_tasks(stored: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        t
        for t in _stored_list(stored, "tasks")
        if isinstance(t.get("description"), str) and t.get("status", "open") in ("open", "in_progress")
    ]


def _match_task(phrase: str, tasks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The open task sharing the most words with ``phrase``: two words, or more than half of the longer side."""
    words = _content_words(phrase)
    if not words:
        return None
    best, best_key = None, (0, 0.0)
    for task in tasks:
        task_words = _content_words(task["description"])
        if not task_words:
            continue
        shared = len(words & task_words)
        ratio = shared / max(len(words), len(task_words))
        key = (shared, ratio)
        if shared >= 1 and (shared >= 2 or ratio > 0.5) and key > best_key:
            best, best_key = task, key
    return best


# --------------------------------------------------------------------------- the result being built
class _Builder:
    def __init__(self, stored: dict[str, Any] | None) -> None:
        self.facts: list[NewFact] = []
        self.profile: dict[str, Any] = {}
        self.goals: list[str] = []
        self.prefs: dict[str, Any] = {}
        self.notes: list[str] = []
        self.tasks: list[TaskUpdate] = []
        self.retracted: dict[str, str] = {}
        self.stored_facts = _active_facts(stored)
        self.open_tasks = _open_tasks(stored)
        # Facts of this message only: one already stored is said again, and the writer counts the
        # repeat and adds this message to its sources (skipped here, a deletion of the first message
        # that said it deleted a fact another message still said).
        self._seen_facts: set[str] = set()
        self.styled: set[str] = set()  # sentences already read for how to answer

    # Each value is checked against the schema as it is added, so the result always validates: a
    # value the schema refuses (a 2,000-character "like", a name of invisible characters, a 51st
    # item) is not a memory, and must not cost the turn the ones that are.
    def fact(self, text: str, importance: str = "medium", tags: list[str] | None = None, *, supersede_prefix: str | None = None) -> None:
        text = third_person(re.sub(r"\s+", " ", text).strip(" ."))
        key = normalize_text(text)
        if not key or key in self._seen_facts or len(self.facts) >= LIST_ITEMS:
            return
        self._seen_facts.add(key)
        if supersede_prefix:  # one value of a single-valued fact a message: the last said ("Just kidding, I live in …")
            self.facts = [f for f in self.facts if not f.text.lower().startswith(supersede_prefix.lower())]
        supersedes = None
        if supersede_prefix:
            for f in self.stored_facts:
                old = f["text"].strip()
                if old.lower().startswith(supersede_prefix.lower()) and normalize_text(old) != key and f.get("id"):
                    supersedes = str(f["id"])
                    break
        if (fact := _valid(NewFact, text=text, importance=importance, tags=tags or [], supersedes=supersedes)) is not None:
            self.facts.append(fact)

    def set_profile(self, field: str, value: str) -> None:
        # The last value a message gives a field is the one it means ("I live in Haifa. Just kidding, I live in Tel Aviv").
        if _valid(ProfileUpdates, **{field: value}) is not None:
            self.profile[field] = value
            self.retracted.pop(field, None)

    def retract_profile(self, field: str, value: str) -> bool:
        """The user says ``field`` no longer holds ``value`` ("I no longer live in Rome"); a new value
        the message gives it ("…, I live in Milan now") is what it means instead, and stays. True when kept."""
        if field in self.profile or _valid(ExtractionResult, retracted={field: value}) is None:
            return False
        self.retracted[field] = value
        return True

    def goal(self, goal: str) -> None:
        goal = third_person(goal)
        if len(self.goals) < LIST_ITEMS and normalize_text(goal) not in {normalize_text(g) for g in self.goals} and _valid(ProfileUpdates, goals=[goal]) is not None:
            self.goals.append(goal)

    def set_pref(self, field: str, value: Any) -> None:
        if field not in self.prefs and _valid(PreferenceUpdates, **{field: value}) is not None:
            self.prefs[field] = value

    def note(self, note: str) -> None:
        if len(self.notes) < LIST_ITEMS and normalize_text(note) not in {normalize_text(n) for n in self.notes} and _valid(PreferenceUpdates, other_notes=[note]) is not None:
            self.notes.append(note)

    def task(self, update: TaskUpdate) -> None:
        if len(self.tasks) >= LIST_ITEMS:
            return
        for t in self.tasks:
            if t.action == update.action and (
                normalize_text(t.description) == normalize_text(update.description)
                or (update.task_id and t.task_id == update.task_id)
            ):
                return
        self.tasks.append(update)

    def result(self) -> ExtractionResult:
        return ExtractionResult(
            new_facts=self.facts,
            new_preferences=PreferenceUpdates(**self.prefs, other_notes=self.notes),
            profile_updates=ProfileUpdates(**self.profile, goals=self.goals),
            task_updates=self.tasks,
            retracted=self.retracted,
        )


def _valid(model: type, **values: Any) -> Any:
    """``model(**values)``, or None when the schema refuses them."""
    try:
        return model(**values)
    except ValidationError:
        return None


# --------------------------------------------------------------------------- the rules
Rule = Callable[[re.Match[str], _Builder, bool], None]
_RULES: list[tuple[re.Pattern[str], Rule]] = []
_QUESTION_RULES: list[tuple[re.Pattern[str], Rule]] = []


def _rule(pattern: str, *, in_questions: bool = False, flags: int = re.I) -> Callable[[Rule], Rule]:
    compiled = re.compile(pattern, flags)

    def register(fn: Rule) -> Rule:
        _RULES.append((compiled, fn))
        if in_questions:
            _QUESTION_RULES.append((compiled, fn))
        return fn

    return register


_I_AM = r"\bI(?:'m| am|m)"
_I_HAVE = r"\bI(?:'ve| have)"
