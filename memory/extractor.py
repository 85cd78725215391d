"""The extraction call: last user message + reply + related stored memories → ExtractionResult."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp

import prompts
from core.dates import date_languages, dated, dated_task, resolve_date
from core.metrics import EXTRACTION_FAILURES, count_failure
from llm.structured import StructuredResult, invoke_structured
from core.schemas import ExtractionResult, NewFact, PreferenceUpdates, ProfileUpdates, normalize_text
from memory.writer.merge_rules import names_value, refines, slot_of
from core.stopwords import STOPWORDS
from core.text_validation import TEXT_CHARS
from core.words import accentless_words, light_stem, third_person, word_runs
from offline_model.rule_extraction import extract_with_rules

log = logging.getLogger(__name__)

# The example facts the prompt and the schema show the model. Small models copy them as facts
# (the 1.5B stored "Lives in Haifa" for "I have a jeep"); such a copy is kept only when the user
# named what the example names (its capitalised words: Haifa, Rex).
# The worked example's facts count too ("text": "…" anywhere in the prompt).
_PROMPT = prompts.text("extraction")
_NEW_FACTS_RULE = next(line for line in _PROMPT.splitlines() if line.startswith("- new_facts:"))
EXAMPLE_FACTS = tuple(
    dict.fromkeys(
        re.findall(r'"([^"]+)"', _NEW_FACTS_RULE)
        + re.findall(r'"text": "([^"]+)"', _PROMPT)
        + re.findall(r"e\.g\. '([^']+)'", NewFact.model_fields["text"].description or "")
    )
)


def render_stored(stored: dict[str, Any]) -> str:
    """Related memories, with ids so the model can say which fact or task it updates."""
    return json.dumps(stored, ensure_ascii=False, default=str, sort_keys=True)


# Memories come from what the user said; the reply is only context for it ("yes, added"), and a
# local model reads every prompt token before its first output token: its head is enough.
REPLY_CONTEXT_CHARS = 600


def reply_context(reply: str) -> str:
    """The head of the assistant's reply, cut at a word, for the extraction prompt."""
    if len(reply) <= REPLY_CONTEXT_CHARS:
        return reply
    return reply[:REPLY_CONTEXT_CHARS].rsplit(" ", 1)[0] + " …"


def build_extraction_messages(user_message: str, reply: str, stored: dict[str, Any]) -> list[BaseMessage]:
    # The instructions first and unchanged from turn to turn: a server's prompt cache reuses them.
    body = "\n\n".join(
        [
            prompts.tagged(prompts.STORED_MEMORIES_TAG, render_stored(stored)),
            prompts.tagged(prompts.USER_MESSAGE_TAG, user_message),
            prompts.tagged(prompts.ASSISTANT_REPLY_TAG, reply_context(reply)),
        ]
    )
    return [SystemMessage(prompts.text("extraction")), HumanMessage(body)]


RULES_ONLY = "rules"
"""The method of a result the model failed to give: only the rules' floor."""


async def extract(
    model: BaseChatModel,
    user_message: str,
    reply: str,
    stored: dict[str, Any],
    config: RunnableConfig | None = None,
    *,
    said_at: datetime | None = None,
    rule_tasks: bool = True,
    rule_texts: list[str] | None = None,
) -> StructuredResult[ExtractionResult]:
    """The model's extraction on the floor of the rules, with relative dates resolved against ``said_at``.

    The rules (offline_model.rule_extraction) run whatever the model: what they find is kept when
    the model returns nothing valid or fails, and a value the model states clearly wins over theirs.
    Raises only when the model failed and the rules found nothing either. ``rule_tasks=False``: the
    user already decided this turn's task changes (a task tool asked them), so the rules add none.
    """
    try:
        floor = extract_with_rules(user_message, stored)
    except Exception as exc:  # a fault of the rules must not cost the turn the model's extraction
        log.warning("memory extraction by the rules failed (%s); the model's alone is kept", type(exc).__name__)
        floor = ExtractionResult()
    if not rule_tasks:
        floor = floor.model_copy(update={"task_updates": []})
    if rule_texts is not None:  # what the rules found, so the writer can say so in each item's source
        rule_texts += [f.text for f in floor.new_facts] + [t.description for t in floor.task_updates]
        rule_texts += [str(v) for part in (floor.profile_updates, floor.new_preferences) for v in part.model_dump(exclude_none=True).values() if not isinstance(v, list)]
    try:
        result = await invoke_structured(model, ExtractionResult, build_extraction_messages(user_message, reply, stored), config=config)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        if floor.is_empty():
            raise
        count_failure(EXTRACTION_FAILURES, exc, model_call=True)
        log.warning("memory extraction by the model failed; keeping what the rules found: %s", str(exc)[:300])
        result = StructuredResult(value=ExtractionResult(), attempts=1, method=RULES_ONLY, errors=[f"{type(exc).__name__}: {str(exc)[:300]}"])
    value = drop_unsaid_facts(drop_echoed_examples(result.value, user_message), user_message, reply)
    value = drop_unstated_profile_values(value, user_message, stored.get("profile") or {})
    value = drop_unstated_preferences(value, user_message, stored.get("preferences") or {})
    value = merge_with_rules(value, floor, user_message, stored_tasks=stored.get("tasks"))
    when, languages = said_at or datetime.now(timezone.utc), _languages(user_message, stored, value)
    value = with_dates(value, when, languages)
    if rule_texts is not None:  # the rules' texts as stored: a task's or fact's carries its date
        dated_floor = with_dates(floor, when, languages)
        rule_texts += [f.text for f in dated_floor.new_facts] + [t.description for t in dated_floor.task_updates]
    return replace(result, value=value)


def _names(text: str) -> set[str]:
    return {w.casefold() for w in word_runs(text)[1:] if w[:1].isupper()}


def drop_echoed_examples(result: ExtractionResult, user_message: str) -> ExtractionResult:
    """``result`` without new facts that repeat one of the prompt's examples the user never spoke of
    (its names, or for an example without one, its other words)."""
    examples = {e.casefold(): _names(e) or {w.casefold() for w in word_runs(e)[1:]} - STOPWORDS for e in EXAMPLE_FACTS}
    said = {w.casefold() for w in word_runs(user_message)}
    kept = [f for f in result.new_facts if f.text.casefold() not in examples or examples[f.text.casefold()] <= said]
    if len(kept) < len(result.new_facts):
        log.warning("extraction: dropped %d fact(s) copied from the prompt's examples", len(result.new_facts) - len(kept))
        return result.model_copy(update={"new_facts": kept})
    return result


def _word_said(word: str, said: list[str]) -> bool:
    """One word is in the message: whole when short ("A2"), else its first four letters begin a word
    of the message ("Italian" / "italiano"), or for a script that joins prefixes to words lie inside one
    (Hebrew "חיפה" in "בחיפה", in Haifa). Not inside a Latin word: "Porto" is not in "sports"."""
    if len(word) <= 3:
        return word in said
    head = word[:4]
    return any(w.startswith(head) or (not head.isascii() and head in w) for w in said)


def _stated(value: str, said: list[str]) -> bool:
    """Some word of ``value`` beyond the stopwords is in the message (:func:`_word_said`)."""
    return any(_word_said(word, said) for word in accentless_words(value) if word not in STOPWORDS)


def _stated_whole(value: str, said: list[str]) -> bool:
    """Every word of a one-line value is in the message: the 0.5B's role "web user" for "I love to
    browse the web" has a word of it, not the whole."""
    words = [w for w in accentless_words(value) if w not in STOPWORDS]
    return bool(words) and all(_stated(w, said) for w in words)


# A role is the user's own only in a sentence about themselves ("I'm a nurse", "I work in marketing").
_SAYS_WHAT_THEY_DO = re.compile(r"\b(?:i'?m|i am|i work|i've worked|i teach|my (?:job|work|career|profession)|work(?:ing)? as|sono)\b|אני", re.I)


def drop_unstated_profile_values(result: ExtractionResult, user_message: str, stored_profile: dict[str, Any] | None = None) -> ExtractionResult:
    """``result`` without profile values the user's message does not contain.

    The profile holds what the user said about themselves; the 1.5B filled every field of an MSC
    speaker who had only said "I have a jeep" (name "bot_0", location Haifa, role "assistant", level
    "intermediate"). A value none of whose words is in the message is a guess, not a statement; what
    a larger model rightly infers ("München" → Munich) is lost from the profile, and is still free to
    arrive as a fact.
    """
    said = accentless_words(user_message)
    stored_profile = stored_profile or {}
    kept: dict = {}
    invented: list[str] = []  # a stored value sent again changes nothing: dropped without a warning
    for field in ProfileUpdates.model_fields:
        value, before = getattr(result.profile_updates, field), stored_profile.get(field)
        if field == "role" and value and not _SAYS_WHAT_THEY_DO.search(user_message):
            value = None  # "My father was a farmer" gave the 0.5B and the 1.5B the role "farmer"
        if isinstance(value, str) and not _stated_whole(value, said):
            if value != before:
                invented.append(field)
            continue
        if isinstance(value, list):
            stated = [v for v in value if _stated(v, said)]
            if any(v not in (before or []) for v in value if v not in stated):
                invented.append(field)
            value = stated
        kept[field] = value
    if invented:
        log.warning("extraction: dropped profile value(s) the user did not state: %s", ", ".join(invented))
    if kept == result.profile_updates.model_dump():
        return result
    return result.model_copy(update={"profile_updates": ProfileUpdates.model_validate(kept)})


# The words a person says each answer length with ("brief" is short): a superset of the rules' own.
ANSWER_LENGTH_WORDS = {
    "short": ("short", "shorter", "brief", "briefer", "briefly", "concise", "concisely", "succinct", "succinctly", "terse"),
    "medium": ("medium", "moderate"),
    "long": ("detailed", "long", "longer", "in-depth", "thorough", "elaborate", "comprehensive"),
}
# A yes/no preference is stated only in a message that speaks of its topic (word beginnings).
_PREFERENCE_TOPICS = {"code_examples": ("code", "exampl", "snippet", "sample"), "prefers_bullets": ("bullet", "list", "point")}
_ABOUT_ANSWERS = re.compile(r"\b(?:answers?|repl(?:y|ies)|responses?|explanations?)\b")


def _lengths_named(text: str) -> set[str]:
    """The answer lengths ``text`` names in any of their words ("brief" is short)."""
    low = text.casefold()
    return {length for length, words in ANSWER_LENGTH_WORDS.items() if re.search(rf"\b(?:{'|'.join(map(re.escape, words))})\b", low)}


def _names_unsaid_length(text: str, said_lengths: set[str]) -> bool:
    """``text`` is about answers and names a length the user did not say ("Prefers medium answers" after "short")."""
    return bool(_ABOUT_ANSWERS.search(text.casefold())) and not _lengths_named(text) <= said_lengths


def drop_unstated_preferences(result: ExtractionResult, user_message: str, stored_preferences: dict[str, Any] | None = None) -> ExtractionResult:
    """``result`` without preferences the user's message does not carry, the rule the profile has.

    The 0.5B answered "I prefer short answers." with answer_length "medium" and a note "Prefers medium
    answers", and filled every preference field on turns that spoke of none (a stored "short" then
    overwritten). A length is stated by one of its words ("brief" is short), a language or tone by a
    word of its value, a yes/no by a word of its topic; a note or fact about answers must name no
    length the user did not say. What the rules read in the message is merged in afterwards.
    """
    said, said_lengths = accentless_words(user_message), _lengths_named(user_message)
    stored_preferences = stored_preferences or {}
    prefs = result.new_preferences.model_dump()
    invented: list[str] = []
    for field, value in prefs.items():
        if value is None or field == "other_notes":
            continue
        if field == "answer_length":
            stated = value in said_lengths
        elif field in _PREFERENCE_TOPICS:
            stated = any(w.startswith(_PREFERENCE_TOPICS[field]) for w in said)
        else:
            stated = _stated(str(value), said)
        if not stated:
            if value != stored_preferences.get(field):
                invented.append(field)
            prefs[field] = None
    notes = [n for n in prefs["other_notes"] if _stated(n, said) and not _names_unsaid_length(n, said_lengths)]
    if len(notes) < len(prefs["other_notes"]):
        invented.append("other_notes")
    prefs["other_notes"] = notes
    facts = [f for f in result.new_facts if not _names_unsaid_length(f.text, said_lengths)]
    if len(facts) < len(result.new_facts):
        invented.append("new_facts")
    if invented:
        log.warning("extraction: dropped preference value(s) the user did not state: %s", ", ".join(invented))
    if prefs == result.new_preferences.model_dump() and len(facts) == len(result.new_facts):
        return result
    return result.model_copy(update={"new_preferences": PreferenceUpdates.model_validate(prefs), "new_facts": facts})


def _fact_words(text: str) -> list[str]:
    """What a fact says beyond stopwords and the templates' and feelings' verbs ("Loves poached eggs": poached, eggs)."""
    return [w for w in accentless_words(text) if w not in STOPWORDS and w not in _FEELING_WORDS]


def _statements(text: str) -> str:
    """``text`` without its questions: asking "Do you like music?" says nothing of the user."""
    return " ".join(s for s in re.split(r"(?<=[.!?])\s+", text) if not s.rstrip().endswith("?"))


def grounded_in(fact: str, user_message: str, reply: str = "") -> bool:
    """The user's own words of this turn carry ``fact``: at least half of what it says is in what they
    stated (their questions left out), its "not" if it has one, one of its names if it has any, and
    none of the rest is in the assistant's reply (the other side's words taken for the user's).

    The 0.5B kept one word of the message and wrote the rest itself or took it from elsewhere: "Teaches
    trumpet in Porto" for "I play the trumpet", a stored "Likes going to the gym to work out" for "I
    work in marketing", "Grilled veggies" from the reply for "I love to grill". A paraphrase keeps
    the thing it is about: "Enjoys exercising at the gym" for "I like going to the gym".
    """
    statements = _statements(user_message)
    if _negated(fact) and not _negated(statements):
        return False  # a "not" the user never said ("Does not like movies" for "the sunset over a movie")
    said, words = accentless_words(statements), _fact_words(fact)
    unsaid = [w for w in words if not _word_said(w, said)]
    # A number the user said is what the fact is about ("Is 31 years old" for "I turned 31!").
    said_number = any(w.isdigit() and w in said for w in words)
    if not words or (2 * len(unsaid) > len(words) and not said_number):
        return False
    named = [n for n in accentless_words(" ".join(w for w in word_runs(fact)[1:] if w[:1].isupper())) if n not in STOPWORDS]
    if named and not any(_word_said(n, said) for n in named):
        return False  # names only what the user did not ("Has lived in Haifa", the prompt's example); "Lisbon, Portugal" is theirs
    replied = accentless_words(reply)
    return not any(_word_said(w, replied) for w in unsaid)


def drop_unsaid_facts(result: ExtractionResult, user_message: str, reply: str = "") -> ExtractionResult:
    """``result`` without the model's facts the user's message does not carry (:func:`grounded_in`).

    With a worked example in the prompt the 0.5B writes facts, but some come from the assistant's
    reply ("Does not own a car" after the user spoke of the gym) or from nowhere ("I love to cook
    healthy food" after "I love poached eggs"), and many keep one word of the message and invent the
    rest. A fact translated into another language than the message's is lost here (the prompt asks
    for the user's language). A question ("Do you like movies?") is not a fact.
    """
    kept = [f for f in result.new_facts if not f.text.rstrip().endswith("?") and grounded_in(f.text, user_message, reply)]
    if len(kept) < len(result.new_facts):
        log.warning("extraction: dropped %d fact(s) the user's message does not carry", len(result.new_facts) - len(kept))
        return result.model_copy(update={"new_facts": kept})
    return result


# --------------------------------------------------------------------------- the rules' floor
def _stem(word: str) -> str:
    """A light stem, so "plays" and "play", "renewing" and "renew" are one word (four letters left)."""
    return light_stem(word, min_stem=4)


def _content(text: str) -> set[str]:
    return {_stem(w) for w in accentless_words(text) if w not in STOPWORDS and len(w) > 2}


def _restates(a: str, b: str) -> bool:
    """Two wordings of one memory ("Renew passport" / "renew my passport next month", "Has a cat
    named Luna" / "Cat is called Luna"): two content words in common, or the one word of the shorter."""
    if normalize_text(a) == normalize_text(b):
        return True
    wa, wb = _content(a), _content(b)
    shared = len(wa & wb)
    return shared >= 2 or (shared == 1 and min(len(wa), len(wb)) == 1)


# The words of the rules' English templates ("Lives in", "Moved to", "Works as"): what a fact says is the rest.
_TEMPLATE_WORDS = frozenset("lives moved works is has likes loves dislikes speaks programs plays does not eat from as in to".split())
# ... and the verbs of a feeling, which say nothing of what it is about ("I love" poached eggs, not cooking).
_FEELING_WORDS = _TEMPLATE_WORDS | frozenset("like love enjoy enjoys prefer prefers want wants really".split())


# A "not" in any of the languages the rules read; "don't" folds to "don" + "t".
_NEGATION = re.compile(r"\b(?:not|no|never|non|nor|לא)\b|n['’]t\b", re.I)
# The rules' verbs of where a person lives or what they are: any wording says the same ("Vive a Roma").
_PLACE_VERBS = frozenset("lives moved works is".split())


def _negated(text: str) -> bool:
    return bool(_NEGATION.search(text))


def _value_words(rule_fact: str) -> list[str]:
    return [w for w in accentless_words(rule_fact) if w not in STOPWORDS and w not in _TEMPLATE_WORDS]


def _has_value_of(model_fact: str, rule_fact: str) -> bool:
    """Every word of the rule's value is in ``model_fact`` ("Lives in חיפה" / "גר בחיפה")."""
    words, theirs = _value_words(rule_fact), accentless_words(model_fact)
    return bool(words) and all(_word_said(w, theirs) for w in words)


def _says_as_much(model_fact: str, rule_fact: str) -> bool:
    """``model_fact`` says what ``rule_fact`` says, in any words or language: every word of the rule's
    value with the same "not" ("Eats meat" does not say "Does not eat meat"), and the rule's verb too
    when the model's fact adds words of its own ("Teaches the trumpet" is not "Plays the trumpet";
    "Moved to Rome" / "Lives in Rome" are one place in other verbs)."""
    if not _has_value_of(model_fact, rule_fact) or _negated(model_fact) != _negated(rule_fact):
        return False
    value = _value_words(rule_fact)
    extra = [w for w in _fact_words(model_fact) if not _word_said(w, value)]
    verb = accentless_words(rule_fact)[0]
    return not extra or verb in _PLACE_VERBS or _word_said(verb, accentless_words(model_fact))


def _denies(model_fact: str, rule_fact: str) -> bool:
    """``model_fact`` has the rule's value with the "not" lost or added: the rules kept the user's own."""
    return _has_value_of(model_fact, rule_fact) and _negated(model_fact) != _negated(rule_fact)


def _meaning(text: str) -> set[str]:
    return {_stem(w) for w in _fact_words(text) if len(w) > 2}


def _vaguer(a: str, b: str) -> bool:
    """``a`` says part of what ``b`` says and nothing else ("Loves warm pants" / "Loves wearing warm
    pants in the winter"): the more specific wording is the one to keep."""
    return _meaning(a) < _meaning(b)


def _slot_value(text: str, slot: str) -> str:
    norm = normalize_text(text)
    at = norm.find(slot)
    return norm[at + len(slot):] if at >= 0 else norm


def _clearly_stated(value: Any, said: list[str]) -> bool:
    """A model's value the user's own words carry (text, or a literal such as "short"); a yes/no
    carries no word to check, so it is clear only when the rules found nothing for its field."""
    return isinstance(value, str) and _stated(value, said)


def _union(first: list[str], second: list[str]) -> list[str]:
    """``first``, then the items of ``second`` that are not one of them said again ("learn hebrew
    properly" restates "learn Hebrew")."""
    seen = [normalize_text(v) for v in first]
    return [*first, *(v for v in second if not any(refines(normalize_text(v), s) for s in seen))]


def merge_with_rules(
    model: ExtractionResult, rules: ExtractionResult, user_message: str, *, stored_tasks: list[dict] | None = None
) -> ExtractionResult:
    """The model's result over the rules' floor: nothing the rules found is lost, and for one slot
    (a profile or preference field, a single-valued fact such as "Lives in …", a task) the model's
    value wins when the user's message clearly states it; otherwise the rules' value stands. A profile
    value the rules read as no longer holding ("I no longer live in Rome") is none the model may set."""
    said = accentless_words(user_message)
    sections: dict[str, dict[str, Any]] = {}
    for name in ("profile_updates", "new_preferences"):
        mine, theirs = getattr(model, name).model_dump(), getattr(rules, name).model_dump()
        merged: dict[str, Any] = {}
        for field, value in mine.items():
            floor = theirs.get(field)
            if isinstance(value, list):
                # Goals in the third person, as the rules write them, so one goal is not kept twice.
                merged[field] = _union([third_person(v) for v in value] if field == "goals" else value, floor or [])
            elif value is None or (floor is not None and value != floor and not _clearly_stated(value, said)):
                merged[field] = floor
            else:
                merged[field] = value
        sections[name] = merged
    for field, said in rules.retracted.items():
        value = sections["profile_updates"].get(field)
        if isinstance(value, str) and names_value(said, value):
            sections["profile_updates"][field] = None  # the model lost the "no longer" the rules read

    facts = list(model.new_facts)
    model_slots = {slot_of(f.text): f for f in facts if slot_of(f.text)}
    known = {normalize_text(f.text) for f in facts}
    for fact in rules.new_facts:
        slot = slot_of(fact.text)
        rival = model_slots.get(slot) if slot else None
        if normalize_text(fact.text) in known:
            continue
        if rival is None:
            theirs = [f for f in facts if any(f is m for m in model.new_facts)]
            denying = [f for f in theirs if _denies(f.text, fact.text)]
            if denying:
                facts = [f for f in facts if not any(f is d for d in denying)]
                facts.append(fact)
                continue
            if any(_says_as_much(f.text, fact.text) for f in theirs):
                continue  # the model said it in its own words
            vaguer = next((i for i, f in enumerate(facts) if any(f is m for m in theirs) and _restates(f.text, fact.text) and _vaguer(f.text, fact.text)), None)
            if vaguer is not None:
                facts[vaguer] = fact  # the model's wording says less than the rules' of the same thing
                continue
            if any(_restates(f.text, fact.text) for f in facts):
                continue  # another wording of it, saying something of its own too
        if rival is not None:
            if _stated(_slot_value(rival.text, slot), said):
                continue  # the model's value for the slot, stated by the user, wins
            facts.remove(rival)  # the model's value is not in the user's words: the rules' stands
        facts.append(fact)

    tasks = list(model.task_updates)
    on_the_list = [str(t.get("description") or "") for t in stored_tasks or [] if t.get("status", "open") in ("open", "in_progress")]
    for update in rules.task_updates:
        if update.action == "add" and any(_restates(d, update.description) for d in on_the_list):
            continue  # already on the list (a task tool added it earlier in this turn, or it was said before)
        twin = next((i for i, t in enumerate(tasks) if t.action == update.action and _restates(t.description, update.description)), None)
        if twin is None:
            tasks.append(update)
        elif not tasks[twin].due and update.due:
            tasks[twin] = tasks[twin].model_copy(update={"due": update.due})
    return ExtractionResult(
        new_facts=facts,
        new_preferences=PreferenceUpdates.model_validate(sections["new_preferences"]),
        profile_updates=ProfileUpdates.model_validate(sections["profile_updates"]),
        task_updates=tasks,
        retracted=rules.retracted,  # the rules' alone: no model is asked for it
    )


# --------------------------------------------------------------------------- dates that stay true
def _languages(user_message: str, stored: dict[str, Any], result: ExtractionResult) -> tuple[str, ...]:
    preferences, profile = stored.get("preferences") or {}, stored.get("profile") or {}
    return date_languages(
        user_message,
        result.new_preferences.language or preferences.get("language"),
        result.profile_updates.native_language or profile.get("native_language"),
    )


def with_dates(result: ExtractionResult, said_at: datetime, languages: tuple[str, ...] = ("en",)) -> ExtractionResult:
    """Each task's due words given the date they meant at ``said_at`` (``due_date``), a new task's
    text that date in place of the words ("Call the dentist on Fri 4 Dec 2026", not "… next Friday",
    which reads wrong a week later), and each fact's relative phrase ("next Tuesday") the date beside
    it, so none goes stale."""
    def fits(dated_text: str, text: str) -> str:  # a date that would take a text past its limit stays out
        return dated_text if len(dated_text) <= TEXT_CHARS else text

    tasks = []
    for task in result.task_updates:
        due_date = resolve_date(task.due, said_at, languages)
        # An update's or completion's text only names the task to change: left as said.
        description = fits(dated_task(task.description, task.due, due_date), task.description) if task.action == "add" else task.description
        tasks.append(task.model_copy(update={"due_date": due_date, "description": description}))
    facts = [f.model_copy(update={"text": fits(dated(f.text, said_at, languages), f.text)}) for f in result.new_facts]
    if tasks == result.task_updates and facts == result.new_facts:
        return result
    return result.model_copy(update={"task_updates": tasks, "new_facts": facts})
