"""Rules for what the user wants: how to answer, likes and dislikes, goals, tasks and their
completion, possessions, relations and "my X is Y"."""

from __future__ import annotations

import re

from core.schemas import TaskUpdate
from offline_model.rules.vocabulary import (
    _TIME,
    _WEEKDAYS,
    _GOAL_BE,
    _GOAL_VERBS,
    _HEALTH_CONDITIONS,
    _LOCATION_TAIL,
    _NOT_LIKE_OBJECTS,
    _NOT_MY_SUBJECTS,
    _NOT_POSSESSIONS,
    _NOT_TASK_VERBS,
    _STOPWORDS,
    _clean_task,
    _cut,
    _find_due,
    _first_word,
    _importance_for,
    _language,
    _tags_for,
    _upper_first,
)
from offline_model.rules.builder import (
    _Builder,
    _I_AM,
    _I_HAVE,
    _match_task,
    _rule,
)
from offline_model.rules.about_you import (
    _CODE_EXAMPLES_IN,
    _PROGRAMMING_LANGUAGES,
)

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


# When it holds is no part of what is liked: "I don't like tea anymore" dislikes tea.
_WHEN_TAIL = re.compile(r"\s+(?:anymore|any more|these days|nowadays|now|again)\s*$", re.I)


def _liked(rest: str) -> str:
    return _WHEN_TAIL.sub("", _cut(rest))


def _object_ok(obj: str) -> bool:
    if not obj or len(obj.split()) > 10 or obj.lower() == "to":  # "yeah, I love to."
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


# A wh-word or an indefinite just before "I like" / "I want to": the object is that word ("what I
# like", "something I love", "where I want to be"), not what follows.
_OBJECT_BEFORE = re.compile(r"\b(?:what|where|whatever|something|anything|everything|nothing|all)\s*$", re.I)


@_rule(r"\bI (?:really |also |do |still |just )?(?P<verb>like|love|enjoy|adore)\s+(?P<x>.+)")
def _like(m: re.Match[str], b: _Builder, casual: bool) -> None:
    if re.search(r"\bas\s*$", m.string[: m.start()], re.I) or _OBJECT_BEFORE.search(m.string[: m.start()]):
        return  # "as I like to say, …" introduces a saying; "that's what I like to hear" has its object before
    obj = _liked(m.group("x"))
    if _style(obj, b, negative=False) or not _object_ok(obj):
        return
    verb = m.group("verb").lower()
    b.fact(f"{'Loves' if verb in ('love', 'adore') else 'Likes'} {obj}", _importance_for(obj, "low"), _tags_for(obj, ["preference"]))


@_rule(r"\bI (?:really )?(?:don't|do not|dont|didn't|never) (?:really )?(?:like|enjoy|love)\s+(?P<x>.+)|\bI (?:really )?(?:hate|dislike|can't stand|cannot stand)\s+(?P<y>.+)")
def _dislike(m: re.Match[str], b: _Builder, casual: bool) -> None:
    obj = _liked(m.group("x") or m.group("y"))
    if _style(obj, b, negative=True) or not _object_ok(obj):
        return
    b.fact(f"Dislikes {obj}", _importance_for(obj, "low"), _tags_for(obj, ["preference"]))


_NEGATIVE = re.compile(r"\b(?:no|not|don't|do not|never|without|stop|avoid|less|fewer|skip|drop|cut)\b", re.I)
# A clause says one thing: "no bullet points, but detailed answers" is two, each with its own "no".
_CLAUSES = re.compile(r"[,:]|\b(?:and|but|with|though)\b", re.I)


def _style_clauses(sentence: str, b: _Builder) -> None:
    # Once a sentence: each "always" or "from now on" in it matches again, and reading the whole
    # sentence at every match was quadratic (a 20,000-character paste took 30 s of the event loop).
    if sentence in b.styled:
        return
    b.styled.add(sentence)
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


# Goal verbs that make a goal on their own ("I want to retire"); the others need their object.
_GOAL_ALONE = frozenset("retire graduate travel move run quit practice practise study improve save".split())


@_rule(r"(?:\bI (?:really )?(?:want|hope|plan|intend)|\bI(?:'d| would) (?:really )?(?:like|love)) to\s+(?P<x>.+)")
def _want_to(m: re.Match[str], b: _Builder, casual: bool) -> None:
    if _OBJECT_BEFORE.search(m.string[: m.start()]):
        return  # "where I want to be in the future": the goal is the "where", not said here
    goal = _cut(m.group("x"), conj=False)
    if goal and len(goal.split()) == 1 and goal.lower() not in _GOAL_ALONE:
        return  # "places I want to visit": the object came before, in a clause this rule does not see
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


# What may stand before an asked-for "remind me": nothing, a clause's end, or a way of asking.
_ASKED_OF_YOU = re.compile(r"(?:^|[,;:!-]|\b(?:please|pls|plz|can you|could you|would you|will you|can u|(?:you|u) to|just|and|also|then|oh|hey|ok|okay|so|(?:don't|do not|dont) forget to|remember to))\s*$", re.I)


@_rule(rf"\bremind me (?:{_WHEN} )?(?:to|that I (?:need|have) to|about)\s+(?P<x>.+)", in_questions=True)
def _remind(m: re.Match[str], b: _Builder, casual: bool) -> None:
    if not _ASKED_OF_YOU.search(m.string[: m.start()]):
        return  # "moments like these remind me to …", "a painting to remind me to …": not a request
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
