"""The rules' vocabulary (role nouns, family and health words, languages, due-date words) and
the small text helpers they share."""

from __future__ import annotations

import re

from core.dates import MONTHS, PART_OF_DAY, TIME_WORDS, WEEKDAYS
from core.stopwords import STOPWORDS, VAGUE
from core.words import light_stem, word_runs

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
_CLOCK_TIME = r"\d{1,2}(?::\d{2})?\s?(?:am|pm)|noon|midnight"
_DAY_WORDS = rf"tomorrow|today|(?:next |this )?(?:{WEEKDAYS})"
_DUE_PATTERNS = (
    # "pay rent on the 1st": a day of the month, only after a preposition and ending the clause ("the 1st draft" is none).
    re.compile(r"\b(?:on|by|before|until) (the \d{1,2}(?:st|nd|rd|th)(?: of (?:the |this |each |every )?(?:next )?month)?)(?=\s*(?:[.,;!?]|$)|\s(?:and|but|please|so)\b)", re.I),
    re.compile(rf"\bby ({_TIME})\b", re.I),
    re.compile(rf"\bon ((?:{_WEEKDAYS})(?: (?:{_PART_OF_DAY}))?|(?:{_MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{_MONTHS}))\b", re.I),
    re.compile(r"\bentro ([^\s,.;!?]+)", re.I),
    # A clock time beside a day is one due ("at 5pm tomorrow" is tomorrow at 5pm, not today); two
    # other time words are not ("remind me today to email Bob tomorrow morning": the task's is the second).
    re.compile(rf"(?<!\w)((?:{_CLOCK_TIME})\s+(?:on\s+)?(?:{_DAY_WORDS})|(?:{_DAY_WORDS})\s+(?:at\s+)?(?:{_CLOCK_TIME})|{_TIME})(?!\w)", re.I),
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
    # a verb or an adverb where the object should be: its object came before ("something I love is
    # awesome", "a job I enjoy every day", "yeah, I love to.")
    + "is are was were makes made gives gave has had keeps every".split()
)

_CONJ = re.compile(
    r"\s+(?:and|but|because|since|so|although|though|which|who|while|whereas|or|e|ma|perché|però)\b", re.I
)
_LOCATION_TAIL = re.compile(
    r"\s+(?:with|for|since|last|now|ago|recently|currently|these|near|when|after|before|this|next|"
    r"from|until|till|in \d{4}|da|con|ora|adesso|עם|כבר|עכשיו)\b",
    re.I,
)
# A point, comma or colon between two digits is part of a number or a time ("10:30", "3.5 km", "1,200"), not a break.
_PUNCT = re.compile(r"(?<![0-9])[.,:]|[.,:](?![0-9])|[;!?()\[\]\"“”«»…\n]")
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


def _content_words(text: str) -> set[str]:
    out: set[str] = set()
    for w in word_runs(text.lower()):
        if w in _STOPWORDS or len(w) < 2:
            continue
        out.add(light_stem(w))
    return out


def _importance_for(text: str, default: str = "medium") -> str:
    words = set(word_runs(text.lower()))
    if words & _FAMILY_WORDS or words & _HEALTH_WORDS:
        return "high"
    return default


def _tags_for(text: str, base: list[str]) -> list[str]:
    words = set(word_runs(text.lower()))
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
