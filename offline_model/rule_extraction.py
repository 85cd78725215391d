"""Rule-based memory extraction: the offline model's stand-in for the extraction call.

Not an LLM: a fixed list of patterns over the user's message (English, plus a few Italian
and Hebrew equivalents) that produce the same :class:`ExtractionResult` a model would.
It is deliberately conservative: a missed memory is cheaper than a wrong one, so
questions, hypotheticals ("if I lived in …") and vague objects ("I like your answer")
produce nothing.

Facts are written with English templates ("Lives in X", "Works as a X") whatever the
language of the message; the values (names, places) keep the user's spelling.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, Callable

from core.dates import MONTHS, PART_OF_DAY, TIME_WORDS, WEEKDAYS
from core.stopwords import STOPWORDS, VAGUE
from core.schemas import (
    ExtractionResult,
    NewFact,
    PreferenceUpdates,
    ProfileUpdates,
    TaskUpdate,
    normalize_text,
)

__all__ = ["extract_with_rules"]

# --------------------------------------------------------------------------- vocabulary
_STOPWORDS = STOPWORDS | VAGUE

_ROLE_NOUNS = frozenset(
    """
    nurse doctor physician surgeon dentist pharmacist paramedic therapist psychologist psychiatrist
    veterinarian vet teacher professor lecturer tutor student researcher scientist engineer developer
    programmer designer architect lawyer attorney accountant auditor manager consultant analyst
    economist banker trader investor writer author journalist editor translator librarian chef cook
    baker pilot driver farmer artist musician singer actor photographer mechanic electrician plumber
    carpenter salesperson marketer entrepreneur founder freelancer retiree firefighter officer soldier
    waiter waitress barista cashier secretary administrator sysadmin tester intern nanny biologist
    chemist physicist mathematician statistician mathematician coach trainer
    """.split()
)

_FAMILY_WORDS = frozenset(
    """
    wife husband partner spouse son sons daughter daughters kid kids child children baby babies mother
    mom mum father dad parent parents brother brothers sister sisters sibling siblings grandmother
    grandma grandfather grandpa grandchild grandson granddaughter aunt uncle cousin niece nephew
    boyfriend girlfriend fiance fiancee family twins
    """.split()
)

_HEALTH_WORDS = frozenset(
    """
    allergy allergies allergic diabetes diabetic asthma celiac coeliac adhd autism epilepsy migraine
    migraines pregnant pregnancy health illness disease condition medication medicine blood pressure
    cholesterol injury surgery cancer depression anxiety insomnia disability
    """.split()
)

_HEALTH_CONDITIONS = (
    "diabetes|asthma|celiac disease|coeliac disease|adhd|autism|epilepsy|migraines|high blood pressure|"
    "low blood pressure|insomnia|anxiety|depression|a food allergy|an allergy"
)

_LANGUAGES = {
    # English names
    **{n: n.capitalize() for n in (
        "english italian hebrew spanish french german portuguese russian arabic chinese mandarin japanese "
        "korean dutch polish turkish greek hindi swedish norwegian danish finnish czech romanian ukrainian "
        "hungarian persian farsi thai vietnamese indonesian catalan yiddish latin"
    ).split()},
    # Italian
    "italiano": "Italian", "inglese": "English", "ebraico": "Hebrew", "spagnolo": "Spanish",
    "francese": "French", "tedesco": "German", "portoghese": "Portuguese", "russo": "Russian",
    "arabo": "Arabic", "cinese": "Chinese", "giapponese": "Japanese",
    # Hebrew
    "עברית": "Hebrew", "אנגלית": "English", "איטלקית": "Italian", "רוסית": "Russian",
    "ערבית": "Arabic", "צרפתית": "French", "ספרדית": "Spanish", "גרמנית": "German",
}

_WEEKDAYS, _MONTHS, _PART_OF_DAY, _TIME = WEEKDAYS, MONTHS, PART_OF_DAY, TIME_WORDS
_DUE_PATTERNS = (
    # "pay rent on the 1st": a day of the month, only after a preposition and ending the clause ("the 1st draft" is none).
    re.compile(r"\b(?:on|by|before|until) (the \d{1,2}(?:st|nd|rd|th)(?: of (?:the |this |each |every )?(?:next )?month)?)(?=\s*(?:[.,;!?]|$)|\s(?:and|but|please|so)\b)", re.I),
    re.compile(rf"\bby ({_TIME})\b", re.I),
    re.compile(rf"\bon ((?:{_WEEKDAYS})(?: (?:{_PART_OF_DAY}))?|(?:{_MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{_MONTHS}))\b", re.I),
    re.compile(r"\bentro ([^\s,.;!?]+)", re.I),
    re.compile(rf"(?<!\w)({_TIME})(?!\w)", re.I),
)

# Goals: "I want to X" only counts when X starts with one of these (chat is full of "I want to know …").
_GOAL_VERBS = frozenset(
    """
    learn become improve master study speak pass lose gain run travel visit move buy save retire graduate
    quit practice practise read finish start open launch write publish get build change be
    """.split()
)
_GOAL_BE = re.compile(r"^be (?:a|an|able|fluent|better|more|healthier|fitter)\b", re.I)
# "I need to X" is a to-do unless X is one of these conversational verbs.
_NOT_TASK_VERBS = frozenset(
    "know understand ask tell explain see clarify figure find be do learn write implement debug solve "
    "לדעת להבין לשאול".split()
)
# "I have a X": objects that are conversation, not facts about the user.
_NOT_POSSESSIONS = frozenset(
    """
    question questions problem problems issue issues doubt idea ideas suggestion request bug error
    minute moment look feeling favor favour quick follow-up followup few lot bit hard good great
    similar different small simple new another couple second meeting appointment call deadline exam
    test interview presentation class lesson flight chance point
    """.split()
)
# "my X is Y": X naming something in the conversation, not the user.
_NOT_MY_SUBJECTS = frozenset(
    """
    question problem issue point idea guess concern answer request fault pleasure turn bet
    understanding assumption code function script program file query output error test app server
    database input result bad mistake message prompt
    """.split()
)
# "I like X": objects that react to the chat rather than describe the user.
_NOT_LIKE_OBJECTS = frozenset(
    "your you this that it these those what how when where which him her them the idea".split()
)

_CONJ = re.compile(
    r"\s+(?:and|but|because|since|so|although|though|which|who|while|whereas|or|e|ma|perché|però)\b", re.I
)
_LOCATION_TAIL = re.compile(
    r"\s+(?:with|for|since|last|now|ago|recently|currently|these|near|when|after|before|this|next|"
    r"from|until|till|in \d{4}|da|con|ora|adesso|עם|כבר|עכשיו)\b",
    re.I,
)
_PUNCT = re.compile(r"[.,;:!?()\[\]\"“”«»…\n]")
_HEB = re.compile(r"[\u0590-\u05FF]")


# --------------------------------------------------------------------------- small helpers
def _has_hebrew(text: str) -> bool:
    return bool(_HEB.search(text))


def _cut(rest: str, *, conj: bool = True, tail: re.Pattern[str] | None = None) -> str:
    """The value at the start of ``rest``: up to punctuation, a conjunction or a tail phrase."""
    m = _PUNCT.search(rest)
    if m:
        rest = rest[: m.start()]
    if conj:
        m = _CONJ.search(rest)
        if m:
            rest = rest[: m.start()]
        if _has_hebrew(rest):
            # Hebrew "and" is a prefix: "בחיפה ואני …" stops before "ואני".
            m = re.search(r"\sו(?=[\u0590-\u05FF])", rest)
            if m:
                rest = rest[: m.start()]
    if tail is not None:
        m = tail.search(rest)
        if m:
            rest = rest[: m.start()]
    return rest.strip(" '’-\t")


def _words(text: str) -> list[str]:
    return text.split()


def _first_word(text: str) -> str:
    w = _words(text)
    return re.sub(r"[^\w'-]", "", w[0]).lower() if w else ""


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _proper_value(value: str, casual: bool, max_words: int) -> str | None:
    value = value.strip()
    if not value:
        return None
    words = _words(value)
    if _has_hebrew(value):
        return " ".join(words[:max_words])
    if casual:
        if len(words) > min(max_words, 3) or words[0].lower() in _STOPWORDS - {"the"}:
            return None
        return " ".join(w if w.lower() == "the" else w.capitalize() for w in words)
    # Keep the run of capitalized words ("Tel Aviv", "the Netherlands", "New York City").
    kept: list[str] = []
    for i, w in enumerate(words):
        if w[:1].isupper() or w[:1].isdigit() or (i == 0 and w.lower() == "the") or (kept and w.lower() in {"de", "da", "di", "del", "van", "von", "la", "le", "el", "al", "bin", "of", "on"}):
            kept.append(w)
        else:
            break
    while kept and kept[-1].lower() in {"de", "da", "di", "del", "van", "von", "la", "le", "el", "al", "bin", "of", "on", "the"}:
        kept.pop()
    if not kept or not any(w[:1].isupper() for w in kept) or len(kept) > max_words:
        return None
    return " ".join(kept)


def _language(word: str) -> str | None:
    word = word.strip(" .,;:!?")
    if not word:
        return None
    known = _LANGUAGES.get(word.lower()) or _LANGUAGES.get(word)
    if known:
        return known
    if re.fullmatch(r"[A-Z][a-z]+(?:ese|ish|ian|ic|an)", word):
        return word
    return None


_STEM_SUFFIXES = ("ing", "ed", "es", "s")


def _content_words(text: str) -> set[str]:
    out: set[str] = set()
    for w in re.findall(r"\w+", text.lower()):
        if w in _STOPWORDS or len(w) < 2:
            continue
        for suf in _STEM_SUFFIXES:
            if len(w) > len(suf) + 2 and w.endswith(suf):
                w = w[: -len(suf)]
                break
        out.add(w)
    return out


def _importance_for(text: str, default: str = "medium") -> str:
    words = set(re.findall(r"\w+", text.lower()))
    if words & _FAMILY_WORDS or words & _HEALTH_WORDS:
        return "high"
    return default


def _tags_for(text: str, base: list[str]) -> list[str]:
    words = set(re.findall(r"\w+", text.lower()))
    tags = list(base)
    if words & _FAMILY_WORDS and "family" not in tags:
        tags.append("family")
    if words & _HEALTH_WORDS and "health" not in tags:
        tags.append("health")
    return tags


def _find_due(description: str) -> str | None:
    for pattern in _DUE_PATTERNS:
        m = pattern.search(description)
        if m:
            return m.group(1).strip()
    return None


def _clean_task(text: str) -> str:
    text = _cut(text, conj=False)
    m = re.search(r"\s+(?:and|but|e|ma)\s+(?:I|io)\b", text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"\s+please$", "", text, flags=re.I)
    return text.strip(" '’-")


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
        self.stored_facts = _active_facts(stored)
        self.open_tasks = _open_tasks(stored)
        self._seen_facts = {normalize_text(f["text"]) for f in self.stored_facts}

    def fact(self, text: str, importance: str = "medium", tags: list[str] | None = None, *, supersede_prefix: str | None = None) -> None:
        text = re.sub(r"\s+", " ", text).strip(" .")
        key = normalize_text(text)
        if not key or key in self._seen_facts:
            return
        self._seen_facts.add(key)
        supersedes = None
        if supersede_prefix:
            for f in self.stored_facts:
                old = f["text"].strip()
                if old.lower().startswith(supersede_prefix.lower()) and normalize_text(old) != key and f.get("id"):
                    supersedes = str(f["id"])
                    break
        self.facts.append(NewFact(text=text, importance=importance, tags=tags or [], supersedes=supersedes))

    def set_profile(self, field: str, value: str) -> None:
        self.profile.setdefault(field, value)

    def goal(self, goal: str) -> None:
        if normalize_text(goal) not in {normalize_text(g) for g in self.goals}:
            self.goals.append(goal)

    def set_pref(self, field: str, value: Any) -> None:
        self.prefs.setdefault(field, value)

    def note(self, note: str) -> None:
        if normalize_text(note) not in {normalize_text(n) for n in self.notes}:
            self.notes.append(note)

    def task(self, update: TaskUpdate) -> None:
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
        )


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


# --- name
@_rule(r"\b(?:my name is|my name's|I'm called|I am called|mi chiamo|il mio nome è)\s+(?P<x>.+)")
def _name(m: re.Match[str], b: _Builder, casual: bool) -> None:
    value = _proper_value(_cut(m.group("x")), casual, max_words=4)
    if value and _first_word(value) not in _STOPWORDS:
        b.set_profile("name", value)


_NATIONALITIES = frozenset(
    "american british english canadian australian irish scottish israeli jewish arab italian french german "
    "spanish mexican brazilian argentinian indian chinese japanese korean russian ukrainian polish dutch greek "
    "turkish catholic christian muslim atheist".split()
)


_STATES = frozenset(
    "tired fine good great ok okay sorry sure back here ready busy hungry happy sad new done excited bored confused "
    "lost sick late early home free stuck curious worried afraid glad interested single married retired exhausted "
    "sleepy thirsty cold hot ill well alright awake online offline available away annoyed angry upset frustrated "
    "nervous scared stressed pregnant vegan vegetarian divorced engaged certain positive serious kidding joking "
    "honest thankful grateful pleased impressed amazed surprised sorry new old young".split()
)


# "Hi! I'm Maya", "Hello, I am Noa Levi.", "I'm Maya, a backend developer": a capitalized word right
# after "I'm" at a sentence's start, ending the clause, names the speaker; states ("I'm Tired"),
# nationalities and languages do not.
@_rule(r"^\s*(?:(?:hi|hello|hey|ciao|shalom)\b[\s,!.-]*(?:there[\s,!.-]*)?)?I(?:'m| am) (?P<x>[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)\s*(?:[.,;!]|$|\s(?:and|but|from|here)\b)")
def _i_am_name(m: re.Match[str], b: _Builder, casual: bool) -> None:
    value = m.group("x")
    first = value.split()[0].lower()
    # Known languages only: the suffix guess of _language would refuse Brian, Julian and Milan.
    if first not in _NATIONALITIES and first not in _LANGUAGES and first not in _STOPWORDS and first not in _STATES and first not in _ROLE_NOUNS:
        b.set_profile("name", value)


@_rule(r"\bcall me\s+(?P<x>.+)")
def _call_me(m: re.Match[str], b: _Builder, casual: bool) -> None:
    value = _proper_value(_cut(m.group("x")), False, max_words=3)  # must be capitalized: "call me tomorrow"
    if value and _first_word(value) not in _STOPWORDS:
        b.set_profile("name", value)


@_rule(r"(?:קוראים לי|השם שלי(?: הוא| היא)?|(?<!\S)שמי)\s+(?P<x>.+)")
def _name_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    value = _cut(m.group("x"))
    if value:
        b.set_profile("name", " ".join(value.split()[:2]))


# --- location
def _lives_in(b: _Builder, place: str, *, moved: bool) -> None:
    b.set_profile("location", place)
    b.fact(f"Lives in {place}", "high", ["location"], supersede_prefix="Lives in ")
    if moved:
        b.fact(f"Moved to {place}", "high", ["location"])


def _named_place(x: str, casual: bool) -> str | None:
    return _proper_value(_cut(x, tail=_LOCATION_TAIL), casual, max_words=5)


def _capitalized_place(x: str, casual: bool) -> str | None:
    # Italian "sono di" also reads "sono di buon umore": only a capitalized name counts, even in casual text.
    return _proper_value(_cut(x, tail=_LOCATION_TAIL), False, max_words=4)


def _hebrew_place(x: str, casual: bool) -> str | None:
    place = _cut(x, tail=_LOCATION_TAIL)
    return " ".join(place.split()[:3]) if place else None


def _is_from(b: _Builder, place: str) -> None:
    b.fact(f"Is from {place}", "high", ["location"])


def _place_rule(read: Callable[[str, bool], str | None], record: Callable[[_Builder, str], None]) -> Rule:
    def rule(m: re.Match[str], b: _Builder, casual: bool) -> None:
        place = read(m.group("x"), casual)
        if place:
            record(b, place)

    return rule


# In registration order, which matters: the first location set wins.
for _pattern, _read, _record in (
    (rf"(?:\bI (?:currently |now |still )?live|{_I_AM} (?:currently |now )?living|\bI (?:currently |now )?reside) in\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=False)),
    (rf"(?:\bI|{_I_HAVE}) (?:just |recently |finally )?moved to\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=True)),
    (rf"(?:{_I_AM}|\bI come) (?:originally )?from\s+(?P<x>.+)", _named_place, _is_from),
    (r"\b(?:vivo|abito) (?:a|ad|in)\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=False)),
    (r"\bmi sono (?:appena )?trasferit[oaie] (?:a|ad|in)\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=True)),
    (r"\bsono (?:originari[oa] )?di\s+(?P<x>.+)", _capitalized_place, _is_from),
    (r"אני (?:גר|גרה|גרים|גרות)\s+ב[-־]?\s*(?P<x>.+)", _hebrew_place, partial(_lives_in, moved=False)),
    (r"(?:עברתי|עברנו) (?:לגור ב|דירה ל)[-־]?\s*(?P<x>.+)", _hebrew_place, partial(_lives_in, moved=True)),
):
    _rule(_pattern)(_place_rule(_read, _record))


# --- role
_ROLE_TAIL = re.compile(r"\s+(?:at|in|for|with|since|from|on|presso|a|per)\b", re.I)


def _set_role(b: _Builder, role: str, article: str | None) -> None:
    b.set_profile("role", role)
    b.fact(f"Works as {article + ' ' if article else ''}{role}", "high", ["work"], supersede_prefix="Works as ")


@_rule(rf"(?:\bI (?:currently |now )?work|{_I_AM} (?:currently |now )?working) as (?:(?P<art>an?|the) )?(?P<x>.+)")
def _work_as(m: re.Match[str], b: _Builder, casual: bool) -> None:
    role = _cut(m.group("x"), tail=_ROLE_TAIL)
    if role and len(role.split()) <= 4 and _first_word(role) not in _STOPWORDS:
        _set_role(b, role, (m.group("art") or "").lower() or None)


# "I'm a nurse", "I'm a teacher at …", "I'm Maya, a backend developer in Lisbon": the last word names a role.
_SELF = rf"(?:{_I_AM}(?: [A-Z][\w'-]+(?: [A-Z][\w'-]+)?,)?|\bI (?:currently |now )?work as|{_I_AM} (?:currently |now )?working as) (?:currently |now |also )?"
_AFTER_ROLE = r"(?=\s*(?:[.,;!]|$)|\s(?:and|but|at|in|for|from|with|based|living|who|working|since)\b)"


@_rule(rf"{_SELF}(?:a|an) (?P<x>(?:[A-Za-z-]+ ){{0,2}}?[A-Za-z-]+){_AFTER_ROLE}")
def _i_am_a(m: re.Match[str], b: _Builder, casual: bool) -> None:
    role = m.group("x").strip()
    last = role.split()[-1].lower()
    if last in _ROLE_NOUNS and not any(w.lower() in _STOPWORDS for w in role.split()):
        _set_role(b, role, "an" if role[:1].lower() in "aeiou" else "a")


# The city of a self-introduction: "a backend developer in Lisbon", "a nurse based in Haifa".
_ROLE_ALTERNATION = "|".join(sorted(_ROLE_NOUNS, key=len, reverse=True))


@_rule(rf"{_SELF}(?:an? )?(?:[A-Za-z-]+ ){{0,2}}?(?:{_ROLE_ALTERNATION})s? (?:(?:at|for) [^,.;!?]+? )?(?:(?:based|living|who lives) )?in (?P<x>.+)")
def _role_in_place(m: re.Match[str], b: _Builder, casual: bool) -> None:
    place = _proper_value(_cut(m.group("x"), tail=_LOCATION_TAIL), False, max_words=4)
    if "location" in b.profile:
        return  # "I live in …" said it outright; where the work is may be elsewhere
    if place and place.lower() not in _PROGRAMMING_LANGUAGES and place.lower() not in _LANGUAGES and _first_word(place) not in _STOPWORDS:
        _lives_in(b, place, moved=False)


@_rule(rf"(?:{_I_AM} (?:currently |now )?|\b(?:{_ROLE_ALTERNATION})s? )based (?:in|out of) (?P<x>.+)")
def _based_in(m: re.Match[str], b: _Builder, casual: bool) -> None:
    place = _named_place(m.group("x"), casual)
    if place and _first_word(place) not in _STOPWORDS:
        _lives_in(b, place, moved=False)


@_rule(r"\bI work (?P<prep>at|for)\s+(?P<x>.+)")
def _work_at(m: re.Match[str], b: _Builder, casual: bool) -> None:
    org = _proper_value(_cut(m.group("x"), tail=_LOCATION_TAIL), casual, max_words=5)
    if org:
        b.fact(f"Works {m.group('prep').lower()} {org}", "high", ["work"])


# "I work in marketing": a field of work, in lower case (a capitalized word is a place or a language).
@_rule(r"\bI (?:currently |now |also )?work in (?P<x>(?:the )?[a-z][a-z-]+(?: [a-z][a-z-]+)?)(?=\s*(?:[.,;!]|$)|\s(?:and|but|at|for|since|now)\b)", flags=0)
def _work_in(m: re.Match[str], b: _Builder, casual: bool) -> None:
    field = m.group("x")
    if _first_word(field) not in _STOPWORDS - {"the"} and not set(field.split()) & {"progress", "order", "shifts", "teams", "it"}:
        b.fact(f"Works in {field}", "high", ["work"])


_SPORTS = "basketball|football|soccer|tennis|golf|baseball|volleyball|hockey|rugby|cricket|chess|badminton|squash|poker|bridge"


# "I play the trumpet", "I play tennis": an instrument or a sport, not "the game" or "the fool".
@_rule(rf"\bI (?:also |still |really )?play (?P<x>the [a-z]+|{_SPORTS})\b(?! game| player)")
def _plays(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = m.group("x").lower()
    if what.split()[-1] not in {"game", "games", "role", "part", "odds", "lottery", "fool", "victim", "field", "same", "other", "best", "most", "last", "first"}:
        b.fact(f"Plays {what}", "low", ["hobby"])


@_rule(r"\bI (?:don't|do not|never|can't|cannot) eat (?P<x>[a-z]+(?: [a-z]+)?)(?=\s*(?:[.,;!]|$)|\s(?:and|but|because|anymore|any ?more)\b)")
def _does_not_eat(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = m.group("x").lower()
    if _first_word(what) not in _STOPWORDS:
        b.fact(f"Does not eat {what}", "medium", ["food"])


@_rule(r"\blavoro come\s+(?P<x>.+)")
def _work_as_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    role = _cut(m.group("x"), tail=_ROLE_TAIL)
    if role and len(role.split()) <= 3:
        _set_role(b, role, None)


@_rule(r"אני (?:עובד|עובדת) (?:בתור\s+|כ[-־]?)(?P<x>[^\s.,;!?]+)")
def _work_as_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _set_role(b, m.group("x"), None)


# --- languages spoken and programming languages
_PROGRAMMING_LANGUAGES = {
    name.lower(): name
    for name in (
        "Python", "JavaScript", "TypeScript", "Java", "Go", "Rust", "C++", "C#", "C", "Ruby", "PHP", "Kotlin",
        "Swift", "Scala", "SQL", "Bash", "R", "Haskell", "Elixir", "Dart", "Lua", "Julia",
    )
}


# A language named with its examples. Case-sensitive: "Go examples" names Go, "go examples" does not.
_CODE_LANGUAGE_NAMES = "|".join(map(re.escape, sorted(_PROGRAMMING_LANGUAGES.values(), key=len, reverse=True)))
_CODE_EXAMPLES_IN = re.compile(
    rf"(?<![\w+#])({_CODE_LANGUAGE_NAMES})(?![\w+#]) (?i:(?:code )?(?:examples?|samples?|snippets?))\b"
    rf"|\b(?i:examples? (?:in|using)) ({_CODE_LANGUAGE_NAMES})(?![\w+#])"
)


_LANGUAGE_LIST = r"(?P<x>[A-Za-z\u0590-\u05FF]+(?:(?:,\s*|\s+and\s+|\s*&\s*)[A-Za-z\u0590-\u05FF]+)*)"


@_rule(rf"\bI (?:also |can |can also )?speak (?:(?P<how>a little|some|basic|fluent|good) )?{_LANGUAGE_LIST}(?!\s+natively)")
def _speaks(m: re.Match[str], b: _Builder, casual: bool) -> None:
    names = [_LANGUAGES.get(w.lower()) for w in re.split(r",\s*|\s+and\s+|\s*&\s*", m.group("x"))]
    if names and all(names):  # only known languages: "I speak my mind" is not one
        how = f"{m.group('how').lower()} " if m.group("how") else ""
        b.fact(f"Speaks {how}{' and '.join(dict.fromkeys(names))}", "medium", ["language"])


_CODE_LIST = rf"(?P<x>(?:{_CODE_LANGUAGE_NAMES})(?![\w+#&/-])(?:(?:,\s*|\s+and\s+)(?:{_CODE_LANGUAGE_NAMES})(?![\w+#&/-]))*)"


# Case-sensitive on the language names: "I code in Go" names Go; "I work in R&D" is not R.
@_rule(rf"(?i:\bI (?:mostly |mainly |usually |also |professionally )?(?:code|program|develop|write code|work|write) (?:mostly |mainly )?(?:in|with)) {_CODE_LIST}", flags=0)
def _codes_in(m: re.Match[str], b: _Builder, casual: bool) -> None:
    names = re.split(r",\s*|\s+and\s+", m.group("x"))
    b.fact(f"Programs in {' and '.join(dict.fromkeys(names))}", "medium", ["work"])


# --- level, age and a few states
@_rule(rf"(?:{_I_AM} (?:an? )?|\bmy level is (?:an? )?)(?P<x>beginner|intermediate|advanced|upper[- ]intermediate|native speaker|[ABC][12])\b")
def _level(m: re.Match[str], b: _Builder, casual: bool) -> None:
    b.set_profile("level", m.group("x"))


@_rule(r"\b(?:my level is|level|livello)\s+(?P<x>[ABC][12])\b")
def _level_cefr(m: re.Match[str], b: _Builder, casual: bool) -> None:
    b.set_profile("level", m.group("x").upper())


@_rule(rf"{_I_AM} (?P<x>\d{{1,3}}) (?:years old|yo)\b")
def _age(m: re.Match[str], b: _Builder, casual: bool) -> None:
    b.fact(f"Is {m.group('x')} years old", "high", ["identity"])


@_rule(rf"{_I_AM} (?:now )?(?P<x>married|divorced|engaged|widowed|pregnant|vegan|vegetarian|retired|diabetic|left-handed)\b")
def _state(m: re.Match[str], b: _Builder, casual: bool) -> None:
    state = m.group("x").lower()
    family = state in {"married", "divorced", "engaged", "widowed"}
    health = state in {"pregnant", "diabetic"}
    b.fact(f"Is {state}", "high" if family or health else "medium", ["family"] if family else ["health"] if health else [])


@_rule(rf"{_I_AM} allergic to\s+(?P<x>.+)")
def _allergy(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = _cut(m.group("x"))
    if what:
        b.fact(f"Is allergic to {what}", "high", ["health"])


# --- native language
@_rule(r"\b(?:my (?:native language|mother tongue|first language) is|la mia (?:lingua madre|madrelingua) è|sono madrelingua)\s+(?P<x>[^\s.,;!?]+)")
def _native(m: re.Match[str], b: _Builder, casual: bool) -> None:
    lang = _language(m.group("x")) or (m.group("x").capitalize() if m.group("x").isalpha() else None)
    if lang:
        b.set_profile("native_language", lang)


@_rule(rf"(?:\bI speak (?P<x>[A-Za-z]+) natively|{_I_AM} a native (?P<y>[A-Za-z]+) speaker)")
def _native_speaker(m: re.Match[str], b: _Builder, casual: bool) -> None:
    lang = _language(m.group("x") or m.group("y"))
    if lang:
        b.set_profile("native_language", lang)


@_rule(r"שפת האם שלי(?: היא)?\s+(?P<x>[^\s.,;!?]+)")
def _native_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    b.set_profile("native_language", _language(m.group("x")) or m.group("x"))


# --- how to answer


_TONES = "formal|informal|casual|friendly|funny|humorous|serious|direct|polite|warm|professional|relaxed"


def _without(thing: str, low: str) -> bool:
    """``thing`` is asked away right before it: "answers without emojis", "no bullet points"."""
    return bool(re.search(rf"\b(?:no|without|fewer|less|zero|avoid|skip)\s+(?:the |any |using |more )?(?:{thing})", low))


def _style(fragment: str, b: _Builder, negative: bool) -> bool:
    """Answer-style preferences in a fragment; True when one was found."""
    low = fragment.lower()
    found = False
    about_answers = bool(re.search(r"\b(?:answers?|repl(?:y|ies)|responses?|explanations?|messages?)\b", low))
    bare = bool(
        re.fullmatch(r"\s*(?:please\s+)?(?:very |more )?(?:short|shorter|brief|briefly|concise|concisely|succinct|detailed|long|longer|thorough)(?:\s+please)?\s*", low)
        or re.search(r"\b(?:be|keep (?:it|them|things|everything))\s+(?:very |more |a bit more )?(?:short|shorter|brief|briefer|concise|succinct|detailed|thorough)\b", low)
        or re.search(r"\b(?:answer|reply|respond|write|explain)\s+(?:more )?(?:briefly|concisely|succinctly|in detail)\b", low)
    )
    if re.search(r"\b(?:short|shorter|brief|briefer|briefly|concise|concisely|succinct|succinctly)\b", low) and (about_answers or bare):
        b.set_pref("answer_length", "long" if negative else "short")
        found = True
    elif re.search(r"\b(?:detailed|long|longer|in-depth|thorough|in detail)\b", low) and (about_answers or bare):
        b.set_pref("answer_length", "short" if negative else "long")
        found = True
    if re.search(r"\bbullet(?:s| points?| lists?)?\b|\bbulleted\b", low):
        b.set_pref("prefers_bullets", not (negative or _without("bullet", low)))
        found = True
    named = _CODE_EXAMPLES_IN.search(fragment)  # "Python examples", "examples in Python"
    if named or re.search(r"\bcode (?:examples?|samples?|snippets?)\b|\bexamples? (?:in|with) code\b", low):
        b.set_pref("code_examples", not negative)
        found = True
        code_language = named or re.search(r"\b(?:in|using)\s+(" + "|".join(map(re.escape, _PROGRAMMING_LANGUAGES)) + r")(?![\w+#])", low)
        if code_language and not negative:  # the object matters: "code examples in Python"
            b.note(f"Prefers code examples in {_PROGRAMMING_LANGUAGES[(code_language.group(1) or code_language.group(2)).lower()]}")
    tone = re.search(rf"\b({_TONES})\b (?:tone|style)\b|\b(?:be|sound|keep (?:it|things)) (?:more |a bit more )?({_TONES})\b", low)
    if tone and not negative:
        b.set_pref("tone", tone.group(1) or tone.group(2))
        found = True
    if re.search(r"\b(?:emojis?|emojies|emoticons?|smileys?)\b", low):  # no field of its own: a note
        b.note("No emojis" if negative or _without("emoj|emoticon|smiley", low) else "Likes emojis")
        found = True
    lang = re.search(r"\bin ([A-Za-z]+)\b", fragment)
    if lang and about_answers and _language(lang.group(1)) and not negative:
        b.set_pref("language", _language(lang.group(1)))
        found = True
    return found


def _object_ok(obj: str) -> bool:
    if not obj or len(obj.split()) > 10:
        return False
    low = obj.lower()
    return _first_word(obj) not in _NOT_LIKE_OBJECTS and not low.startswith("the idea")


@_rule(r"\bI (?:really |also |much |do |still |generally |usually )?prefer\s+(?P<x>.+)")
def _prefer(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _cut(m.group("x"))
    if not _style(obj, b, negative=False) and _object_ok(obj):
        b.note(f"Prefers {obj}")


@_rule(r"\bI(?:'d| would) (?:really )?(?:like|prefer|love)\s+(?P<x>(?!to\b).+)")
def _would_like(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _style(_cut(m.group("x")), b, negative=False)


@_rule(r"\bI (?:really |also |do |still |just )?(?P<verb>like|love|enjoy|adore)\s+(?P<x>.+)")
def _like(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _cut(m.group("x"))
    if _style(obj, b, negative=False) or not _object_ok(obj):
        return
    verb = m.group("verb").lower()
    b.fact(f"{'Loves' if verb in ('love', 'adore') else 'Likes'} {obj}", _importance_for(obj, "low"), _tags_for(obj, ["preference"]))


@_rule(r"\bI (?:really )?(?:don't|do not|dont|didn't|never) (?:really )?(?:like|enjoy|love)\s+(?P<x>.+)|\bI (?:really )?(?:hate|dislike|can't stand|cannot stand)\s+(?P<y>.+)")
def _dislike(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _cut(m.group("x") or m.group("y"))
    if _style(obj, b, negative=True) or not _object_ok(obj):
        return
    b.fact(f"Dislikes {obj}", _importance_for(obj, "low"), _tags_for(obj, ["preference"]))


_NEGATIVE = re.compile(r"\b(?:no|not|don't|do not|never|without|stop|avoid|less|fewer|skip|drop|cut)\b", re.I)
# A clause says one thing: "no bullet points, but detailed answers" is two, each with its own "no".
_CLAUSES = re.compile(r"[,:]|\b(?:and|but|with|though)\b", re.I)


def _style_clauses(sentence: str, b: _Builder) -> None:
    for clause in _CLAUSES.split(sentence):
        if clause.strip():
            _style(clause, b, negative=bool(_NEGATIVE.search(clause)))


# "Always …", "keep it brief", "no emojis please", "without bullet points", "short replies please",
# "answer briefly": a request about how to answer, in whatever words.
@_rule(
    r"^\s*(?:please[, ]+)?(?:always|keep|use|be|no|avoid|stop|skip|don't|do not|never|without|less|fewer|"
    r"short|shorter|brief|briefer|concise|detailed|longer)\b"
    # "answer briefly", "reply without emojis"; not "reply to this email in Italian" (one message)
    r"|^\s*(?:please[, ]+)?(?:answer|reply|respond|write)(?: me)? (?:briefly|concisely|succinctly|in detail|shorter|longer|with(?:out)? |more |less )"
    r"|\b(?:from now on|always|in (?:the )?future|going forward|in general)\b|\bplease\s*[.!]*\s*$"
)
def _imperative_style(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _style_clauses(m.string, b)


# "Can you keep your answers short?", "could you stop using emojis?": a request, though a question.
# Only about answers in general (plural, "it", "always"), not one answer ("a short summary of this").
@_rule(
    r"^\s*(?:can|could|would|will) you (?:please )?(?:always |just |also )?(?:keep|make|use|stop|avoid|write|answer|reply|respond|be|give)\b"
    r"(?=.*\b(?:answers|replies|responses|messages|it|things|always|from now on|emojis?|bullet points|bullets)\b)",
    in_questions=True,
)
def _asked_style(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _style_clauses(m.string, b)


@_rule(r"\b(?:(?:answer|reply|respond)(?: to me| back)?|(?:write|speak|talk) (?:to me|back)) (?:only |always )?in\s+(?P<x>[A-Za-z]+)\b")
def _reply_in(m: re.Match[str], b: _Builder, casual: bool) -> None:
    lang = _language(m.group("x"))
    if lang:
        b.set_pref("language", lang)


@_rule(r"\b(?:rispondi(?:mi)?|rispondete|parlami|scrivimi) (?:sempre |solo )?in\s+(?P<x>\w+)")
def _reply_in_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    lang = _language(m.group("x"))
    if lang:
        b.set_pref("language", lang)


@_rule(r"(?:תענה|תעני|ענה|עני|תכתוב|תכתבי|כתוב|תדבר|תדברי)(?: לי| איתי)?\s+ב[-־]?(?P<x>[^\s.,;!?]+)")
def _reply_in_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    lang = _language(m.group("x"))
    if lang:
        b.set_pref("language", lang)


_IT_ARTICLE = re.compile(r"^(?:(?:il|lo|la|i|gli|le)\s+|l')", re.I)


@_rule(r"\bpreferisco\s+(?P<x>.+)")
def _prefer_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _IT_ARTICLE.sub("", _cut(m.group("x")))
    if obj:
        b.note(f"Prefers {obj}")


@_rule(r"(?<!non )\bmi (?:piace|piacciono)\s+(?P<x>.+)")
def _like_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _IT_ARTICLE.sub("", _cut(m.group("x")))
    if obj:
        b.fact(f"Likes {obj}", _importance_for(obj, "low"), ["preference"])


@_rule(r"\b(?:non mi (?:piace|piacciono)|odio)\s+(?P<x>.+)")
def _dislike_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _IT_ARTICLE.sub("", _cut(m.group("x")))
    if obj:
        b.fact(f"Dislikes {obj}", _importance_for(obj, "low"), ["preference"])


@_rule(r"אני (?P<neg>לא )?(?:אוהב|אוהבת)\s+(?P<x>.+)|אני (?:שונא|שונאת)\s+(?P<y>.+)")
def _like_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _cut(m.group("x") or m.group("y"))
    if obj:
        verb = "Dislikes" if m.group("neg") or m.group("y") else "Likes"
        b.fact(f"{verb} {obj}", "low", ["preference"])


# --- goals
def _goal(b: _Builder, goal: str, fact: str) -> None:
    b.goal(goal)
    b.fact(fact, "medium", ["goal"])


@_rule(r"\bmy (?:main |big |long-term )?(?:goal|dream|aim|plan) is (?:to )?(?P<x>.+)")
def _my_goal(m: re.Match[str], b: _Builder, casual: bool) -> None:
    goal = _cut(m.group("x"), conj=False)
    if goal and len(goal.split()) <= 12:
        _goal(b, goal, f"Wants to {goal}" if _first_word(goal) in _GOAL_VERBS else f"Goal: {goal}")


@_rule(r"(?:\bI (?:really )?(?:want|hope|plan|intend)|\bI(?:'d| would) (?:really )?(?:like|love)) to\s+(?P<x>.+)")
def _want_to(m: re.Match[str], b: _Builder, casual: bool) -> None:
    goal = _cut(m.group("x"), conj=False)
    if goal and len(goal.split()) <= 12 and (_first_word(goal) in _GOAL_VERBS or _GOAL_BE.match(goal)):
        _goal(b, goal, f"Wants to {goal}")


@_rule(rf"{_I_AM} (?:currently |now |still )?(?P<verb>learning|studying)\s+(?P<x>.+)")
def _learning(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = _cut(m.group("x"), tail=_LOCATION_TAIL)
    if what and _first_word(what) not in {"how", "about", "that", "to", "it", "this"} and len(what.split()) <= 6:
        verb = "learn" if m.group("verb").lower() == "learning" else "study"
        _goal(b, f"{verb} {what}", f"Is {m.group('verb').lower()} {what}")


@_rule(r"\b(?:sto imparando|sto studiando|voglio imparare)\s+(?P<x>.+)")
def _learning_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = _cut(m.group("x"))
    if what and len(what.split()) <= 6:
        fact = f"Wants to learn {what}" if m.group(0).lower().startswith("voglio") else f"Is learning {what}"
        _goal(b, f"learn {what}", fact)


@_rule(r"\bil mio obiettivo è\s+(?P<x>.+)")
def _goal_it(m: re.Match[str], b: _Builder, casual: bool) -> None:
    goal = _cut(m.group("x"), conj=False)
    if goal:
        _goal(b, goal, f"Goal: {goal}")


@_rule(r"אני (?:לומד|לומדת)\s+(?P<x>.+)|אני (?:רוצה|רוצים) ללמוד\s+(?P<y>.+)")
def _learning_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    what = _cut(m.group("x") or m.group("y"))
    if what:
        _goal(b, f"learn {what}", f"{'Is learning' if m.group('x') else 'Wants to learn'} {what}")


# --- tasks
def _add_task(b: _Builder, description: str) -> None:
    description = _clean_task(description)
    if not description or len(description.split()) > 20:
        return
    b.task(TaskUpdate(action="add", description=description, status="open", due=_find_due(description)))


_WHEN = rf"(?P<when>{_TIME}|later|on (?:{_WEEKDAYS}))"


@_rule(rf"\bremind me (?:{_WHEN} )?(?:to|that I (?:need|have) to|about)\s+(?P<x>.+)", in_questions=True)
def _remind(m: re.Match[str], b: _Builder, casual: bool) -> None:
    desc = _clean_task(m.group("x"))
    when = m.group("when")
    if desc and when and when.lower() != "later":
        desc = f"{desc} {when}"
    _add_task(b, desc)


@_rule(r"\b(?:don't|do not|dont) let me forget (?:to |about )?(?P<x>.+)|\b(?:ricordami di|non farmi dimenticare di)\s+(?P<y>.+)", in_questions=True)
def _dont_forget(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _add_task(b, m.group("x") or m.group("y"))


@_rule(r"(?:תזכיר|תזכירי|תזכרי) לי\s+(?P<x>.+)", in_questions=True)
def _remind_he(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _add_task(b, m.group("x"))


@_rule(r"\bI (?:really |still |also )?need to\s+(?P<x>.+)|אני (?:צריך|צריכה)\s+(?P<y>ל.+)")
def _need_to(m: re.Match[str], b: _Builder, casual: bool) -> None:
    desc = m.group("x") or m.group("y")
    if _first_word(desc) in _NOT_TASK_VERBS or len(_clean_task(desc).split()) < 2:
        return
    _add_task(b, desc)


@_rule(r"(?:^\s*(?:todo|to-do)\b\s*[:\-]?|\b(?:todo|to-do)(?: list)?\s*:)\s*(?P<x>.+)")
def _todo(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _add_task(b, m.group("x"))


def _complete(b: _Builder, phrase: str) -> None:
    task = _match_task(_cut(phrase, conj=False), b.open_tasks)
    if task is not None:
        b.task(TaskUpdate(action="complete", description=task["description"], task_id=str(task["id"]) if task.get("id") else None, status="done"))


@_rule(rf"(?:\bI (?:just |already |finally )?(?:did|finished|completed)|{_I_HAVE} (?:just |already |finally )?(?:done|finished|completed)|{_I_AM} done with|\bho (?:già |appena )?(?:fatto|finito|completato))\s+(?P<x>.+)")
def _did(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _complete(b, m.group("x"))


@_rule(r"^(?:the |my |that |this )?(?P<x>.+?) (?:is|are|was) (?:now |already |finally |all )?(?:done|finished|completed|complete)\b")
def _is_done(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _complete(b, m.group("x"))


@_rule(r"^\s*done\s*[:\-]\s*(?P<x>.+)|(?:סיימתי|עשיתי)\s+(?:את\s+)?(?P<y>.+)")
def _done_prefix(m: re.Match[str], b: _Builder, casual: bool) -> None:
    _complete(b, m.group("x") or m.group("y"))


# --- possessions, relations and "my X is Y"
@_rule(rf"(?:{_I_HAVE} got|\bI have|\bI've) (?P<n>a|an|one|two|three|four|five|six|\d+) (?P<x>.+)")
def _have(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _cut(m.group("x"))
    if not obj or _first_word(obj) in _NOT_POSSESSIONS or _first_word(obj) in _STOPWORDS or len(obj.split()) > 8:
        return
    b.fact(f"Has {m.group('n').lower()} {obj}", _importance_for(obj), _tags_for(obj, []))


@_rule(rf"\bI (?:have|suffer from) (?P<x>{_HEALTH_CONDITIONS})\b")
def _condition(m: re.Match[str], b: _Builder, casual: bool) -> None:
    b.fact(f"Has {m.group('x').lower()}", "high", ["health"])


_HANDLED_MY = re.compile(r"(?:name|native language|mother tongue|first language|level|(?:main |big |long-term )?(?:goal|dream|aim|plan))$", re.I)


@_rule(r"\bmy (?P<x>(?:[\w'’-]+ ){0,3}?[\w'’-]+) is (?P<y>.+)")
def _my_x_is(m: re.Match[str], b: _Builder, casual: bool) -> None:
    subject = m.group("x").replace("’", "'")
    words = subject.lower().split()
    if (
        _HANDLED_MY.match(subject)
        or any(w in _NOT_MY_SUBJECTS for w in words)
        or any(w in _STOPWORDS for w in words)
    ):
        return
    value = _cut(m.group("y"))
    if not value or len(value.split()) > 8 or _first_word(value) in {"that", "to", "not", "this", "it"}:
        return
    importance = _importance_for(subject)
    if importance != "high" and re.search(r"\bfavou?rite\b", subject, re.I):
        importance = "low"
    b.fact(f"{_upper_first(subject)} is {value}", importance, _tags_for(subject, []))


# --------------------------------------------------------------------------- entry point
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+|;\s*")
_HYPOTHETICAL = re.compile(r"^\s*(?:if|suppose|supposing|imagine|assuming|what if|let's say|se|immagina)\b", re.I)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


def extract_with_rules(user_message: str, stored: dict[str, Any] | None = None) -> ExtractionResult:
    """Memories the user stated in ``user_message``, found by fixed rules (deterministic).

    ``stored`` holds related memories already saved, in the extraction prompt's shape
    (``{"facts": [{"id", "text", ...}], "tasks": [{"id", "description", "status"}], ...}``);
    every key is optional. It is used to skip facts already stored, to supersede an old
    "Lives in …" / "Works as …" fact, and to find the id of a task the user says is done.
    """
    builder = _Builder(stored)
    text = (user_message or "").replace("’", "'").replace("‘", "'")
    casual = not any(c.isupper() for c in text)
    for sentence in _sentences(text):
        if _HYPOTHETICAL.match(sentence):
            continue
        is_question = sentence.rstrip().endswith("?")
        rules = _QUESTION_RULES if is_question else _RULES
        body = sentence.rstrip(" ?")
        for pattern, rule in rules:
            for m in pattern.finditer(body):
                rule(m, builder, casual)
    return builder.result()
