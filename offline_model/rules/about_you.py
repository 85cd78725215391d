"""Rules for who the user is: name, where they live, work and come from, languages, level, age,
a few states and health conditions."""

from __future__ import annotations

import re
from functools import partial
from itertools import takewhile
from typing import Callable

from offline_model.rules.vocabulary import (
    _LANGUAGES,
    _LOCATION_TAIL,
    _ROLE_NOUNS,
    _STOPWORDS,
    _cut,
    _first_word,
    _language,
    _proper_value,
)
from offline_model.rules.builder import (
    Rule,
    _Builder,
    _I_AM,
    _I_HAVE,
    _rule,
)

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
# nationalities and languages do not. The rules match ignoring case, so the capitals are checked
# here: "I'm super thankful." names nobody. In all-lowercase text only a greeting before it
# ("hey i'm maya") makes the word a name.
@_rule(r"^\s*(?P<hi>(?:hi|hello|hey|ciao|shalom)\b[\s,!.-]*(?:there[\s,!.-]*)?)?I(?:'m| am) (?P<x>[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)\s*(?:[.,;!]|$|\s(?:and|but|from|here)\b)")
def _i_am_name(m: re.Match[str], b: _Builder, casual: bool) -> None:
    words = m.group("x").split()
    if casual and m.group("hi"):
        value = " ".join(words)
    else:
        capitalized = list(takewhile(lambda w: w[0].isupper(), words))
        if not capitalized:
            return
        value = " ".join(capitalized)
    first = value.split()[0].lower()
    # Known languages only: the suffix guess of _language would refuse Brian, Julian and Milan.
    if first not in _NATIONALITIES and first not in _LANGUAGES and first not in _STOPWORDS and first not in _STATES and first not in _ROLE_NOUNS:
        b.set_profile("name", value)


# Only the user's own request names them: "(please|you can) call me Dani", not "don't call me Bob"
# nor "my friends call me Dani" (a nickname others use, after "my name is Dana").
_CALL_ME_ASKED = re.compile(r"(?:^|[,;:!]|\b(?:and|but|so)\b)\s*(?:(?:oh|ok|okay|hi|hey|hello|well|please|just|you can|you may|you could|feel free to|i'd like you to|i want you to|everyone|everybody)[\s,]*)*$", re.I)


@_rule(r"\bcall me\s+(?P<x>.+)")
def _call_me(m: re.Match[str], b: _Builder, casual: bool) -> None:
    if not _CALL_ME_ASKED.search(m.string[: m.start()]):
        return
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
    (rf"(?:\bI|{_I_HAVE}) (?:just |recently |finally )?moved (?:from [^,.;!?]+? )?to\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=True)),
    (rf"(?:{_I_AM}|\bI come) (?:originally )?from\s+(?P<x>.+)", _named_place, _is_from),
    (r"(?<!\bnon )\b(?:vivo|abito) (?:a|ad|in)\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=False)),  # not "non vivo a Roma"
    (r"\bmi sono (?:appena )?trasferit[oaie] (?:a|ad|in)\s+(?P<x>.+)", _named_place, partial(_lives_in, moved=True)),
    (r"\bsono (?:originari[oa] )?di\s+(?P<x>.+)", _capitalized_place, _is_from),
    (r"אני (?:גר|גרה|גרים|גרות)\s+ב[-־]?\s*(?P<x>.+)", _hebrew_place, partial(_lives_in, moved=False)),
    (r"(?:עברתי|עברנו) (?:לגור ב|דירה ל)[-־]?\s*(?P<x>.+)", _hebrew_place, partial(_lives_in, moved=True)),
):
    _rule(_pattern)(_place_rule(_read, _record))


# --- a place or a role that no longer holds
# "I no longer live in Rome", "I'm not a nurse anymore": the field is cleared if it still holds that
# value (memory.writer). Only "no longer", "anymore", "stopped", "moved out of" say so: "I don't live in
# Rome" may answer a question about a trip. Questions, hypotheticals and other people's words are
# skipped like every rule's ("Do I still live in Rome?", "my sister no longer lives in Rome").
_NO_MORE = re.compile(r"\s+(?:any ?more|no more)\b.*", re.I | re.S)


def _retract_place(m: re.Match[str], b: _Builder, casual: bool) -> None:
    if (place := _named_place(_NO_MORE.sub("", m.group("x")), casual)) and b.retract_profile("location", place):
        # The fact says so too: the writer supersedes "Lives in Rome" with it (its negation).
        b.fact(f"No longer lives in {place}", "high", ["location"])


for _pattern in (
    rf"(?:\bI no longer (?:live|reside) in|{_I_AM} no longer living in|\bI (?:have |'ve )?(?:just |recently |finally )?moved (?:out of|away from))\s+(?P<x>.+)",
    rf"(?:\bI (?:don't|do not|dont) (?:live|reside)|{_I_AM} not living) in\s+(?P<x>[^,;!?]+?\s+any ?more\b.*)",
    r"\bnon (?:vivo|abito) più (?:a|ad|in)\s+(?P<x>.+)",
):
    _rule(_pattern)(_retract_place)


# --- role
# Where, for whom or since when is no part of the role, nor is when it holds ("a teacher now").
_ROLE_TAIL = re.compile(r"\s+(?:at|in|for|with|since|from|on|presso|a|per|now|currently|again|these days|nowadays)\b", re.I)


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
# (When it holds is no part of it either: "I'm a nurse now", "… these days".)
_AFTER_ROLE = r"(?=\s*(?:[.,;!]|$)|\s(?:and|but|at|in|for|from|with|based|living|who|working|since|now|currently|again|these days|nowadays)\b)"


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


# "I'm not a nurse anymore", "I no longer work as a nurse", "I stopped working as a nurse": see "a place
# or a role that no longer holds" above.
def _role_said(x: str) -> str:
    return _cut(_NO_MORE.sub("", x), tail=_ROLE_TAIL)


def _retract_role(m: re.Match[str], b: _Builder, casual: bool) -> None:
    role = _role_said(m.group("x"))
    if role and len(role.split()) <= 4 and _first_word(role) not in _STOPWORDS and b.retract_profile("role", role):
        # In the words of "Works as a nurse", which the writer supersedes with it (its negation); an
        # Italian role is stored without an article ("Works as infermiere").
        article = "" if m.group(0)[:3].lower() == "non" else "an " if role[:1].lower() in "aeiou" else "a "
        b.fact(f"No longer works as {article}{role}", "high", ["work"])


def _retract_role_noun(m: re.Match[str], b: _Builder, casual: bool) -> None:
    # Only a role noun, as for "I'm a nurse": "I'm not a fan anymore" is no role.
    role = _role_said(m.group("x"))
    if role and role.split()[-1].lower() in _ROLE_NOUNS:
        _retract_role(m, b, casual)


for _pattern, _retract in (
    (rf"(?:\bI no longer work as|\bI (?:have |'ve )?(?:stopped|quit) working as|{_I_AM} no longer working as) (?:(?:an?|the) )?(?P<x>.+)", _retract_role),
    (rf"(?:\bI (?:don't|do not|dont) work as|{_I_AM} not working as) (?:(?:an?|the) )?(?P<x>[^,;!?]+?\s+any ?more\b.*)", _retract_role),
    (r"\bnon lavoro più come\s+(?P<x>.+)", _retract_role),
    (rf"{_I_AM} no longer (?:an?|the) (?P<x>.+)", _retract_role_noun),
    (rf"{_I_AM} not (?:an?|the) (?P<x>[^,;!?]+?\s+any ?more\b.*)", _retract_role_noun),
    (r"\bnon sono più (?:(?:un|una|uno)\s+|un')(?P<x>.+)", _retract_role),
):
    _rule(_pattern)(_retract)


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
