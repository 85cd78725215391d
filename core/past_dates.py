"""Dates of the past, as said and as asked.

Two jobs, both against the time something was said, never the wall clock:

* :func:`resolve_relative`: a relative phrase in a past message ("yesterday", "last week",
  "two days ago", "on the 15th") gets the date it meant beside it, so an excerpt read months
  later still says when: "yesterday" said on 8 May 2023 reads "yesterday (7 May 2023)";
  :func:`dates_meant` gives those dates alone, which the index of what was said searches with
  the message's words (a question naming 7 May finds what was said "yesterday" on 8 May);
* :func:`question_range`: the span of time a question asks about ("in May", "last spring",
  "in 2022", "last week", "on 7 July, 2023", "the week before 16 November"), as ``(since, until)``,
  for a search of that span.

English only, rules only (no parser): the phrases people use for the recent past. Dates are
written as people (and LoCoMo's answers) write them: "7 May 2023".
"""

from __future__ import annotations

import calendar
import logging
import re
from datetime import date, datetime, timedelta, timezone

__all__ = [
    "PHRASE_CONTEXT_CHARS", "RELATIVE_HINT", "RULES", "dates_meant", "names_a_date", "resolve_relative", "question_range", "day_text",
    "weekday_of_next_week",
]  # fmt: skip

# The rules' edition: raised whenever a phrase's reading changes, so that the dates stored with
# what was said are worked out again (``storage.episodes.setup``). 2: "(the) day after tomorrow"
# and "day before yesterday" (read as tomorrow and yesterday); a phrase after the word "the" ("in
# the last month") has no date; "a few days ago" names no invented day (it read as three). 3: "on
# the 15th" (a day of the month, by the sentence's tense). 4: "last Fri", "this past weekend", "two
# weekends ago". 5: "on the 15th" only within the month it was said in, and not "on the 3rd floor".
# 6: how long something has gone on ("I've had them for 3 years now": since 2019); "this weekend",
# "next weekend". 7: "the other day" (a few days before). 8: no date for a phrase that is part of a
# larger time ("a week from tomorrow", "the week before Christmas", "twenty-two years ago", "3 years
# and 2 months ago"), a title or an idiom ("The Day After Tomorrow", "born yesterday"), "last" as
# "final" ("our last night in Rome"), "the other day" in a sentence counting days, "on the 30th"
# said in a month without one, nor "this weekend" said midweek of no plan. 9: a named weekday:
# "next Friday" (Friday of the week after), "this Friday" and "on Friday" by the sentence's tense (not in
# a habit, a quote, a report, nor of a thing after "from", "after" …: "sore from the hike on Saturday").
RULES = 9

log = logging.getLogger(__name__)

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "fall": (9, 12), "autumn": (9, 12), "winter": (12, 15)}  # months [start, end)
_N = r"(?P<n>\d{1,2}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"


def day_text(when: datetime) -> str:
    """"8 May 2023", how people (and LoCoMo's answers) write dates: the UTC day, whatever zone
    ``when`` comes in (``_utc``)."""
    when = _utc(when)
    return f"{when.day} {when:%B %Y}"


def _month_text(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{_MONTHS[month - 1].capitalize()} {year}"


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.casefold()]


def _weekday_before(said: datetime, name: str) -> datetime:
    day = next(i for i, d in enumerate(_WEEKDAYS) if d.startswith(name.casefold()[:3]))  # "Fri" too
    back = (said.weekday() - day) % 7 or 7
    return said - timedelta(days=back)


# A plan told of in the past tense, and "she's coming", "you're flying" (which _AHEAD leaves to "is").
_ARRANGED = re.compile(
    r"\b(?:tickets?|booked|planned|scheduled|signed up|registered|reserved|invited|arranged|organi[sz]ed|promised|agreed|decided"
    r"|(?:was|were) (?:\w+ )?(?:hoping|thinking|planning|wondering|meaning|supposed))\b",  # "I was hoping to catch up on Friday"
    re.I,
)
_AHEAD_TOO = re.compile(r"\w(?:'s|'re) \w+ing\b", re.I)  # _sentence reads ’ as '
# A word in -ing after "'s" or "is" that is no plan: "my cousin's wedding on Saturday", "the photos are amazing".
_NO_PLAN_ING = re.compile(
    r"\w's\s+(?:wedding|meeting|morning|evening|painting|building|drawing|feeling|sibling|darling|ring|cooking|thing)\b"
    r"|(?:'s|'re|'m|\b(?:is|are|am))\s+(?:(?:something|nothing|everything|anything|amazing|interesting|boring|exciting|annoying|confusing"
    r"|relaxing|exhausting|depressing|disappointing|frustrating|surprising|terrifying|stunning|charming|inspiring|refreshing|embarrassing"
    r"|overwhelming|heartwarming|touching|fascinating|shocking|worrying|encouraging|promising|amusing|pleasing)\b)",
    re.I,
)
# A plan's change told in the past: "our flight on Sunday got cancelled" (the flight may lie ahead).
_CHANGED = re.compile(r"\b(?:cancell?ed|rescheduled|postponed|called off|pushed (?:back|up)|delayed|(?:got|was|been) moved)\b", re.I)
# More of the past than _PAST reads (it serves "on the 15th" too): "my car broke down on Wednesday, so I'm
# taking the bus" is of both tenses, not a plan for Wednesday; "I've got a date on Friday" is no past.
_PAST_TOO = re.compile(
    r"\b(?:broke|sent|spent|paid|sold|kept|slept|fell|caught|taught|thought|brought|built|chose|drank|forgot|grew|hid|knew|meant"
    r"|rode|rang|sang|sat|shook|stood|stole|swam|threw|woke|wore|fought|blew|became|sank|tore|understood|happened|passed away|died)\b",
    re.I,
)
_HAVE_GOT = re.compile(r"(?:'ve|\bhave|\bhas|'s)\s+got\b", re.I)
# A habit, not a day: "When I was a kid we went to church on Sunday", "we used to play cards on Friday".
_HABIT = re.compile(
    r"\b(?:always|usually|often|normally|typically|generally|sometimes|never|every|each|used to|growing up|as (?:a )?kids?"
    r"|when (?:I|we) (?:was|were) (?:a )?(?:kids?|child|children|little|young|younger|teens?|teenagers?))\b",
    re.I,
)
# A day told of with a tense that is not its own. Reported ("She told me the party is on Saturday", "I heard
# the store opens on Wednesday", "Did you know the store is closed on Sunday?"): a past report of a present
# or coming day; the day after "is" ("the exam is on Monday") is never one gone.
_REPORTED = re.compile(r"\b(?:said|told|heard|found out|announced|reminded|mentioned|learned|learnt|realized|realised|read|know|knew|texted|emailed)\b", re.I)
_PRESENT = re.compile(r"\b(?:is|are|isn't|aren't|do|does|opens|closes|starts|begins|ends|arrives|comes|come out|leaves|lands|runs)\b", re.I)
_IS_ON = re.compile(r"\b(?:is|are|isn't|aren't|\w's|\w're)\s+\Z", re.I)
# A day of a thing named after "from", "after", "about" … ("I'm still recovering from the party on Friday",
# "my legs are killing me after the hike on Saturday", "I found a dress for the wedding on Saturday"): the
# sentence's tense is of the verb, not of the party, the hike or the wedding ("I got back from the trip on
# Sunday" is the coming back's, "I went for a run on Saturday" the going's).
_OF_A_THING = re.compile(r"(?<!\bback )(?<!\bhome )\b(?:from|after|since|about|before|of|for)\s+(?:the|my|our|your|his|her|their|that|this)\s+(?:[\w'-]+\s+){1,3}\Z", re.I)


def weekday_of_next_week(name: str, today: date) -> date:
    """``name``'s day in the (Monday-first) week after ``today``'s: "next Friday" said on Thursday
    26 Nov is 4 Dec, not tomorrow (the common reading; a task's due date reads it so too)."""
    next_monday = today + timedelta(days=7 - today.weekday())
    return next_monday + timedelta(days=_WEEKDAYS.index(name.casefold()))


def _next_is_sure(name: str, today: date, meant: date) -> bool:
    """Whether "next <name>" said ``today`` can mean only ``meant``: the first such day after today is
    that weekday in the week after, whether weeks start on Monday or on Sunday ("next Sunday" said on
    a Sunday; "next Monday" said on a Friday; not "next Friday" said on a Monday, nor "next Monday"
    said on a Sunday, tomorrow or eight days on)."""
    day = _WEEKDAYS.index(name)
    first = today + timedelta(days=(day - today.weekday()) % 7 or 7)
    sunday_first = lambda d: (d + 1) % 7  # noqa: E731
    in_a_sunday_week = today + timedelta(days=7 - sunday_first(today.weekday()) + sunday_first(day))
    return first == meant == in_a_sunday_week


def _named_weekday(m: re.Match, said: datetime) -> str | None:
    """"next Friday" as :func:`weekday_of_next_week` where no other reading is likely; "this Friday" and "on Friday" as the sentence's
    tense says: the coming one in a plan ("I'm going on a picnic on Sunday"), the one just gone in a
    telling of the past ("I won the tournament on Friday"). No date for the day it was said on (today
    or a week away?), a sentence of both tenses or neither ("I swim on Fridays" is not matched; "we
    meet on Friday" is), one naming another week, month or year ("last week on Friday"), nor where the
    sentence's tense is not the day's: a habit ("when I was a kid we went to church on Sunday"), a day
    quoted or reported ("she told me the party is on Saturday"), the day of a thing after "from",
    "after", "about" … ("I'm still sore from the hike on Saturday"), a plan changed ("our flight on
    Sunday got cancelled")."""
    name = m.group("wday").casefold()
    if m.group("wway").casefold() == "next":
        if re.search(r"\bthat\s+\Z", m.string[max(0, m.start() - 8) : m.start()], re.I) or re.match(r"\s+(?:was|were)\b", m.string[m.end() :], re.I):
            return None  # "That next Friday we went back", "Next Friday was a blur": the one after a day of the past
        meant = weekday_of_next_week(name, said.date())
        if not _next_is_sure(name, said.date(), meant):
            return None  # "next Friday" said on a Monday: this week's Friday to many, next week's to others
        return day_text(datetime.combine(meant, datetime.min.time()))
    sentence = _sentence(m)
    if _NAMES_A_MONTH.search(sentence) or re.search(r"\bweek(?:end)?s?\b", sentence, re.I) or re.match(r"\s+the\s+\d", m.string[m.end() :]):
        return None  # "last week on Friday", "Friday the 13th"
    if _IF.search(sentence) or _ARRANGED.search(sentence) or _CHANGED.search(sentence):
        return None  # "we could go on Friday", "I got tickets for the show on Saturday": a plan told in the past
    if _HABIT.search(sentence) or re.match(r"\s+(?:nights|mornings|afternoons|evenings)\b", m.string[m.end() :], re.I):
        return None  # "we always have pizza on Friday", "we went dancing on Friday nights"
    before = m.string[max(0, m.start() - 40) : m.start()].replace("\u2019", "'")
    if _OF_A_THING.search(before) or _IS_ON.search(before) or (_REPORTED.search(sentence) and _PRESENT.search(sentence)):
        return None  # "sore from the hike on Saturday", "the exam is on Monday", "she said the party is on Saturday"
    said_before = _SENTENCE_END.split(m.string[max(0, m.start() - _SENTENCE_REACH) : m.start()])[-1]
    if said_before.count('"') % 2 or said_before.count("\u201c") > said_before.count("\u201d"):
        return None  # quoted: 'He texted me "see you on Saturday"' (the quote's tense is not the sentence's)
    past = _PAST.search(_HAVE_GOT.sub(" have", sentence)) is not None or _PAST_TOO.search(sentence) is not None
    plans = _NO_PLAN_ING.sub(" ", sentence)
    ahead = _AHEAD.search(plans) is not None or _AHEAD_TOO.search(plans) is not None
    day = _WEEKDAYS.index(name)
    if past and not ahead:
        back = (said.weekday() - day) % 7
        return day_text(said - timedelta(days=back)) if back else None
    if ahead and not past:
        forward = (day - said.weekday()) % 7
        return day_text(said + timedelta(days=forward)) if forward else None
    return None


# A determiner just before a phrase: "in the last month" is the past thirty days, "the last week of
# April" a week named after it, "our last night in Rome" the final one; none is the calendar's last
# month, week or night ("breathe last night" is).
# ("her" is left out: "I saw her last night" is the night before.)
_AFTER_THE = re.compile(r"(?<![\w'])(?:the|my|our|his|their|your|its|every|very)\s+\Z", re.I)


def _after_the(text: str, at: int) -> bool:
    """Whether a determiner comes just before ``text[at:]``."""
    return _AFTER_THE.search(text, max(0, at - 16), at) is not None


# A phrase inside a larger time ("a week from tomorrow", "the year before last year", "two days
# before yesterday") or a larger number ("twenty-two years ago", "3 or 4 years ago", "1.5 years ago",
# "5-10 years ago", "3 years and 2 months ago"): what it meant is not what it says alone.
_PART_OF_A_TIME = re.compile(r"\b(?:days?|nights?|weeks?|weekends?|months?|years?)\s+from\s+\Z|\b(?:before|after)\s+(?:the\s+)?\Z", re.I)
_PART_OF_A_NUMBER = re.compile(
    r"(?:\d[.,]|-|\u2013|\b(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred)[\s-]+"
    r"|(?:\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|a|few))\s+(?:or|to)\s+|\b(?:years?|months?|weeks?|days?)\s*,?\s+and\s+)\Z",
    re.I,
)
# Idioms and titles that hold a phrase but name no day: "I wasn't born yesterday", "like there's no
# tomorrow", "that's so last year"; a title is a phrase capitalised word by word in mid-sentence ("Have
# you seen The Day After Tomorrow?", "I Know What You Did Last Summer").
_IDIOM = re.compile(r"\bborn yesterday\b|\bno tomorrow\b|\btomorrow is another day\b|\bso last (?:year|week|month|night)\b", re.I)


def _names_no_time(text: str, m: re.Match) -> bool:
    """A phrase of ``text`` (a message's or a question's) that names no time of its own: inside a
    larger time ("the day before yesterday" read from "yesterday", "before last year"), an idiom, or
    a title (two or more words capitalised after a word on the same line: "Last Week Tonight")."""
    before = text[max(0, m.start() - 24) : m.start()]
    if _PART_OF_A_TIME.search(before):
        return True
    if any(i.start() <= m.start() and m.end() <= i.end() for i in _IDIOM.finditer(text, max(0, m.start() - 24), min(len(text), m.end() + 24))):
        return True
    words = m.group(0).split()
    return len(words) > 1 and all(w[0].isupper() for w in words) and re.search(r"\w[ \t]+\Z", before) is not None


def _not_a_day(m: re.Match) -> bool:
    if (m.group("unit") or m.group("dunit")) and _PART_OF_A_NUMBER.search(m.string, max(0, m.start() - 24), m.start()):
        return True
    return _names_no_time(m.string, m)


def _reading(m: re.Match, said: datetime) -> str | None:
    """The date ``m`` meant, or None; a rule that fails on a text gives no date, never an error (a
    message must still be written, searched and shown)."""
    try:
        found = None if _not_a_day(m) else _resolved(m, said)
    except Exception:
        log.warning("No date read for %r: the rule failed", m.group(0), exc_info=True)
        return None
    # A reading ends with its year; one outside the calendar ("3 years ago" said in year 2, by a
    # sender's clock) is no date.
    years = re.findall(r"-?\d+", found or "")
    return None if years and not 1 <= int(years[-1]) <= 9999 else found


def _resolved(m: re.Match, said: datetime) -> str | None:
    phrase = " ".join(m.group(0).casefold().split()).removeprefix("the ")
    if phrase.startswith(("last ", "next ", "this ")) and _after_the(m.string, m.start()):
        return None  # no date beats a wrong one
    if phrase in ("yesterday", "last night"):
        return day_text(said - timedelta(days=1))
    if phrase == "day before yesterday":
        return day_text(said - timedelta(days=2))
    if phrase == "tomorrow":
        return day_text(said + timedelta(days=1))
    if phrase == "day after tomorrow":
        return day_text(said + timedelta(days=2))
    if phrase == "other day":
        # An idiom for the recent past with no number: as "a few days ago" is written. Not "one
        # day … the other day" or "on the other day" (the second of two days).
        if re.search(r"\bon\s+\Z", m.string[max(0, m.start() - 4) : m.start()], re.I) or _COUNTS_DAYS.search(_sentence(m)):
            return None
        return f"a few days before {day_text(said)}"
    if phrase == "week before" and not re.match(r"\s*(?:[.,!?;:)]|\Z)", m.string[m.end() :]):
        return None  # "the week before Christmas", "the week before last", "… and the week before I slept"
    if phrase in ("last week", "week before", "other week"):
        return f"the week before {day_text(said)}"
    if phrase in ("last weekend", "this past weekend"):
        return f"the weekend before {day_text(said)}"
    if phrase in ("this weekend", "this coming weekend", "next weekend"):
        return _weekend(m, phrase, said)
    if phrase == "next week":
        return f"the week after {day_text(said)}"
    if phrase == "next month":
        return _month_text(said.year, said.month + 1)
    if phrase == "last month":
        return _month_text(said.year, said.month - 1)
    if phrase == "last year":
        return str(said.year - 1)
    if phrase == "next year":
        return str(said.year + 1)
    if phrase == "this year":
        return str(said.year)
    if phrase == "this month":
        return _month_text(said.year, said.month)
    if m.group("weekday"):
        return f"{day_text(_weekday_before(said, m.group('weekday')))}"
    if m.group("wday"):
        return _named_weekday(m, said)
    if m.group("nth"):
        return _day_of_month(m, said)
    if m.group("dunit"):
        return _since(m, said)
    if m.group("season"):
        season = m.group("season").casefold()
        start, _ = _latest_season(season, said.replace(tzinfo=None), ended=True)
        return f"{season} {start.year}"
    if m.group("unit"):
        n, unit = _count(m.group("n")), m.group("unit").casefold().rstrip("s")
        if unit == "weekend":  # "two weekends ago": as people (and LoCoMo's answers) write it
            said_n = m.group("n").casefold()
            count = "a few" if said_n == "few" else str(n) if said_n == "couple of" else m.group("n")
            return f"{count} weekend{'' if n == 1 and count != 'a few' else 's'} before {day_text(said)}"
        if m.group("n").casefold() == "few":  # how many is not said: no invented day
            when = {"month": _month_text(said.year, said.month), "year": str(said.year)}.get(unit, day_text(said))
            return f"a few {unit}s before {when}"
        if unit == "day":
            return day_text(said - timedelta(days=n))
        if unit == "week":
            return f"the week of {day_text(said - timedelta(weeks=n))}"
        if unit == "month":
            return _month_text(said.year, said.month - n)
        if unit == "year":
            return str(said.year - n)
    return None


# "On the 15th" names a day of a month it does not say. Only the month it was said in is read: a
# day before the one it was said on when the sentence tells of the past ("I met the team on the
# 15th", said on the 17th), a day after when it looks ahead ("I fly out on the 20th"). Otherwise
# no date, since a wrong month is worse than none:
# - a day past it in a sentence of the past ("I got tickets for the show on the 22nd" is ahead);
# - the same day, or a day a UTC day's shift could move across it;
# - a sentence naming a month ("on the 15th, in August", "the 15th last month");
# - a sentence with both tenses or neither.
# The tense is read from a few words, not parsed.
_PAST = re.compile(
    r"\b(?:was|were|went|met|had|did|got|came|saw|took|made|told|said|spoke|heard|felt|found|bought|gave|won(?!['\u2019]t)|lost|ran|wrote|flew|drove|ate|left|began|started|finished|"
    r"(?:I|we|he|she|they|you) \w*[a-df-z]ed)\b",  # "we started", not "we need"
    re.I,
)
# "won't" is "will not", not "won" ("I won't be there on Friday" read as the Friday gone, "on the 20th" as a day before).
_AHEAD = re.compile(r"\b(?:will|won't|going to|gonna|plan(?:ning)? to|hope to|can't wait|looking forward|'ll|next)\b|(?:'m|am|are|is) \w+ing\b", re.I)
# A sentence naming another time than this month: a month, a year, "born", "ago" ("Last year we met
# on the 5th", "I was born on the 3rd").
_NAMES_A_MONTH = re.compile(
    rf"\b(?:{'|'.join(_MONTHS)}|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec|months?|(?:last|next) years?|(?:19|20)\d\d|born|ago)\b", re.I
)
# A sentence about two days or a weekday: "the other day" is then the second of them ("a day in Rome and
# the other day in Florence", "free Tuesday, but the other day I'm busy", "one of the days …").
_COUNTS_DAYS = re.compile(
    r"\b(?:one|1|first|second|each|either|both|two|2)\s+(?:of\s+the\s+)?days?\b|(?<!what )(?<!such )\ba\s+day\s+(?:in|at|on|for|off|with|of)\b"
    rf"|\b(?:{'|'.join(_WEEKDAYS)})\s*,?\s*(?:but|or|and)\s+the\s+other\s+day\b|\bor\s+the\s+other\s+day\b",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?]\s|\n")
_SENTENCE_REACH = 400  # characters either side: a run-on text costs each phrase no more than this
PHRASE_CONTEXT_CHARS = _SENTENCE_REACH + 100
"""How far past a phrase its reading may look: a text cut this far beyond a phrase reads it the same."""


def _sentence(m: re.Match) -> str:
    text = m.string
    low, high = max(0, m.start() - _SENTENCE_REACH), min(len(text), m.end() + _SENTENCE_REACH)
    starts = [e.end() for e in _SENTENCE_END.finditer(text, low, m.start())]
    end = _SENTENCE_END.search(text, m.end(), high)
    return text[starts[-1] if starts else low : end.start() + 1 if end else high].replace("\u2019", "'")


def _day_of_month(m: re.Match, said: datetime) -> str | None:
    sentence = _sentence(m)
    if _NAMES_A_MONTH.search(sentence):
        return None
    past, ahead = _PAST.search(sentence) is not None, _AHEAD.search(sentence) is not None
    day = int(m.group("nth"))
    if day > calendar.monthrange(said.year, said.month)[1]:
        return None  # "on the 30th" said in February: not this month, and which is not said
    # A day at least two from the one it was said on: the UTC day may be a local day off.
    if (past and not ahead and day <= said.day - 2) or (ahead and not past and day >= said.day + 2):
        return day_text(datetime(said.year, said.month, day))  # a day before (after) one of the month: in it
    return None


# How long something has gone on, up to when it was said: "I've had them for 3 years now" said in
# January 2022 began in 2019, "Seven years now" said in 2023 in 2016. Only a span that lasts until
# then, so only in a clause of the perfect tense: "for …" after "I've been", "I have had", "she has
# known" in the same clause ("Been playing it for a month now"), or "N years now" opening a sentence
# or after "it's been". Not "we were teammates for four years" (it ended no one knows when), "I'll
# stay for a year", "I've lived in Paris for 2 years before moving", "I've been offered a contract
# for 2 years", "It costs $10 a month now", "for 1.5 years", "a year and a half".
_PERFECT = re.compile(
    r"(?:\b(?<!could )(?<!would )(?<!should )(?<!might )(?<!must )(?:have|has)|(?<!could)(?<!would)(?<!should)(?<!might)(?<!must)'ve|(?<!\blet)'s)"
    r"(?: \w+ly)? (?:been(?! (?:offered|given|approved|sentenced|banned|suspended|grounded|hired|signed|extended|renewed|delayed|booked|scheduled"
    r"|granted|accepted|assigned|sent|elected|appointed|chosen|picked|invited|told|asked|paid|charged|fined|locked|postponed|jailed|imprisoned"
    r"|transferred|put|awarded|issued|leased|loaned|lent|posted|deployed|seconded|relocated|reassigned|drafted|contracted|commissioned"
    r"|funded|sponsored|cast|called)\b)|had|known|lived|owned|worked"
    r"|played|practi[cs]ed|studied|taught|volunteered|collected|followed|loved|wanted|dated)\b|^\s*been\b",
    re.I,
)
_CLAUSE_START = re.compile(r".*(?:[,;:\n.!?()]|\b(?:and|but|that|then|so|because|lol|when|if|though)\b)", re.I | re.S)
_SPAN_ENDS = re.compile(
    r"(?: now)?[\s,;]*(?:and\s+)?(?:of|old|before|then|until|till|in (?:high|college|school|uni)|back|when|earlier|to go|left|later|ago"
    r"|a half|\d|an?|one|two|three|four|five|six|seven|eight|nine|ten|\w+ months?)\b",
    re.I,
)
_NOW_ENDS = re.compile(r" now\s+(?:that|until|till|to|left|before|instead|i|we|you|he|she|they|it|there)\b", re.I)
_PLANS = re.compile(r"\?|\b(?:plan|plans|planned|free|want|wanna|hope|excited|ready|have|got|doing|heading|off to|is|are)\b", re.I)
_IF = re.compile(r"\b(?:if|could|would|should|might|wish)\b|'d\b", re.I)
_APPROXIMATELY = ("about", "almost", "nearly", "over", "around", "roughly", "just under", "just over", "under", "less than", "more than")


def _since(m: re.Match, said: datetime) -> str | None:
    text = m.string.replace("\u2019", "'")
    before = text[max(0, m.start() - 80) : m.start()]
    clause = _CLAUSE_START.sub("", before)
    part_of_more = re.search(r"(?:\d[.,]|(?:years?|months?) and\s+)\Z", text[max(0, m.start() - 16) : m.start("dn")], re.I)  # "1.5 years"
    ends_before_now = _SPAN_ENDS.match(text, m.end("dunit"))  # "for 2 years before moving", "a year and a half"
    if part_of_more or ends_before_now or (m.group("now") and _NOW_ENDS.match(text, m.end("dunit"))):  # "now that I'm retired"
        return None
    if _AHEAD.search(clause) or _IF.search(_sentence(m)) or re.search(r"\b(?:in|next|another|more|coming|within|only|just)\s+\Z", clause, re.I):
        return None
    if m.group("for"):
        if not _PERFECT.search(clause):
            return None
    elif not (m.group("now") and re.fullmatch(r"\s*(?:(?:it|that)(?:'s| has) been|been)?\s*", clause, re.I)):
        return None  # "Seven years now, and …", "It's been two months now"; not "quite a month now"
    n, unit = _count(m.group("dn").casefold().removeprefix("a ")), m.group("dunit").casefold()
    about = "about " if m.group("approx") else ""
    if unit.startswith("year"):
        return f"since {about}{said.year - n}"
    return f"since {about}{_month_text(said.year, said.month - n)}"


# "This weekend" and "next weekend" name a Saturday only where the day said leaves no doubt which:
# "this weekend" said Friday to Sunday is that weekend, said Tuesday to Thursday the coming one
# (unless told of as past); said on a Monday it may be the one just gone. "Next weekend" is the one
# after the coming one only said Friday to Sunday; said earlier in the week, people mean either.
def _weekend(m: re.Match, phrase: str, said: datetime) -> str | None:
    text = m.string
    if re.search(r"\bafter\s+\Z", text[max(0, m.start() - 8) : m.start()], re.I) or re.match(r"\s+after next\b", text[m.end() :], re.I):
        return None  # "the weekend after next weekend"
    day = said.weekday()  # Monday 0
    if phrase == "next weekend":
        ahead = {4: 8, 5: 7, 6: 6}.get(day)
    elif phrase == "this coming weekend":
        ahead = 5 - day if day < 5 else {5: 7, 6: 6}[day]
    elif day >= 4:
        ahead = 5 - day  # Friday 1, Saturday 0, Sunday -1
    else:
        # Tuesday to Thursday, only a plan is the coming weekend ("Thanks for this weekend!" is not).
        sentence = _sentence(m)
        ahead = 5 - day if day >= 1 and not _PAST.search(sentence) and (_AHEAD.search(sentence) or _PLANS.search(sentence)) else None
    return None if ahead is None else f"the weekend of {day_text(said + timedelta(days=ahead))}"


# "On the 3rd" as a date, not an ordinal of something: "on the 3rd floor", "on the 2nd try" are not.
_NTH_ENDS = r"(?=\s*(?:[.,!?;:)]|$)|\s+(?:and|after|before|at|when|with|so|but|because|too|as|then|already|for|to|in|we|I)\b)"


_RELATIVE = re.compile(
    r"(?<![\w(])(?:yesterday|last night|(?:the )?day before yesterday|(?:the )?day after tomorrow|tomorrow|last week|the week before|the other week|the other day|last weekend|"
    r"next week|next month|last month|last year|next year|this year|this month|"
    # A weekday's short name too ("last Fri"); "Wed", "Sat" and "Sun" only capitalised and not
    # before a name ("when I last sat", "my last Sun Valley trip").
    rf"last (?P<weekday>{'|'.join(_WEEKDAYS)}|mon|tues?|thu(?:rs?)?|fri|(?-i:(?:Wed|Sat|Sun)(?! [A-Z])))|last (?P<season>spring|summer|fall|autumn|winter)|"
    rf"(?P<wway>next|this|on) (?P<wday>{'|'.join(_WEEKDAYS)})|"
    rf"this past weekend|{_N} (?P<unit>days?|weeks?|weekends?|months?|years?) ago|"
    rf"on the (?P<nth>[1-9]|[12]\d|3[01])(?:st|nd|rd|th){_NTH_ENDS}|this weekend|this coming weekend|next weekend|"
    # How long, to now (_since); "now" taken whole, so a resolved "now (since 2019)" stays as it is.
    rf"(?P<for>for )?(?P<approx>{'|'.join(a + ' ' for a in _APPROXIMATELY)})?(?:the (?:past|last) )?"
    r"(?P<dn>\d{1,2}|a couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten) (?P<dunit>years?|months?)(?! ago\b)(?P<now> now)?+"
    r")(?![\w)]|-\w| \()",
    re.I | re.A,  # ASCII case folding, as Postgres' ~* (RELATIVE_HINT) folds: "ſ" is not "s"
)


def _utc(said: datetime) -> datetime:
    """Days are UTC days here, as questions' named days are (``question_range``), whatever zone a
    time comes in (a row read back from Postgres is in the session's)."""
    return said.astimezone(timezone.utc) if said.tzinfo is not None else said


def resolve_relative(text: str, said: datetime) -> str:
    """``text`` with the date each relative phrase meant after it, in brackets ("yesterday (7 May 2023)")."""
    said = _utc(said)
    out, done = [], 0
    for m in _RELATIVE.finditer(text):
        # After a possessive or "'s" ("yesterday's game (…)" would split the word): "yesterday's (7 May 2023) game".
        s = _POSSESSIVE.match(text, m.end())
        end = s.end() if s else m.end()
        if s and text.startswith(" (", end):
            continue  # already resolved
        date = _reading(m, said)
        if date:
            out += [text[done:end], f" ({date})"]
            done = end
    return "".join(out) + text[done:]


_POSSESSIVE = re.compile(r"['\u2019]s\b")


def dates_meant(text: str, said: datetime) -> str:
    """The dates ``text``'s relative phrases meant, said at ``said``, in order ("7 May 2023 2022";
    "" when it has none), in UTC days."""
    said = _utc(said)
    return " ".join(d for d in (_reading(m, said) for m in _RELATIVE.finditer(text)) if d)


# A case-insensitive POSIX pattern every text holding a phrase ``dates_meant`` resolves matches
# (more texts match it too): what a database finds the rows to work out again by (storage.episodes).
RELATIVE_HINT = (
    "yesterday|tomorrow|last|next|this (year|month)|(year|month)s? now|for .*(year|month)|weekend|week before|other (week|day)|ago|on the [0-9]"
    "|(this|on) (mon|tues|wednes|thurs|fri|satur|sun)day"
)


# --------------------------------------------------------------------------- questions
# A month named as one: not "June's husband" (a name).
_MONTH = rf"(?:{'|'.join(_MONTHS)})(?!['\u2019]s\b)"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_YEAR_AFTER = rf"(?:,?\s*(?:of\s+|in\s+)?{_YEAR})?"  # after a day: "May 3, 2021", "3 May 2021", "May 3 of 2021"
_YEAR_AFTER_WORD = rf"(?:,?\s+(?:of\s+|in\s+)?{_YEAR})?"  # after a month or season: "May 2021", "summer of 2021"
_Q_MONTH = re.compile(rf"\b(?P<prep>in|during|of|since) (?:early |late |mid-?)?(?P<month>{_MONTH}){_YEAR_AFTER_WORD}\b", re.I)
_Q_YEAR = re.compile(rf"\b(?:in|during|of) {_YEAR}\b", re.I)
_Q_SEASON = re.compile(rf"\b(?:(?P<which>last|this|in|during) )?(?:the )?(?P<season>spring|summer|fall|autumn|winter){_YEAR_AFTER_WORD}\b", re.I)
# A day named in the question ("on 7 July, 2023", "on May 3", "8th December, 2023"), and a span
# reaching from it ("the week before", "two weeks before", "the Monday before", "the Saturday after").
# Not a count ("May 2 people", "in May 2 years ago", "the top 10 May releases"), nor one end of
# "August 11-15" (_Q_DAY_RANGE); "may" before a verb is the verb (``_a_month``).
_ORD = r"(?:st|nd|rd|th)?"
_NOT_A_DAY_AFTER = r"(?!\s*(?:years?|months?|weeks?|days?|hours?|minutes?|people|persons|times|more|others|of (?:them|us|these|those))\b|\s*[-\u2013]\s*\d)"
_Q_DAY = re.compile(
    rf"\b(?:(?P<m1>{_MONTH})\s+(?P<d1>\d{{1,2}}){_ORD}\b{_NOT_A_DAY_AFTER}|(?<!\btop )(?P<d2>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<m2>{_MONTH})){_YEAR_AFTER}\b",
    re.I,
)
# Two days of one month: "between 11 and 15 August", "August 11-15", "from May 2 to 5, 2022" ("and"
# and "to" only after "between" or "from": "on August 1 and 30" names two days, not a span).
_Q_DAY_RANGE = re.compile(
    rf"\b(?P<lead>(?:between|from)\s+)?(?:(?P<a1>\d{{1,2}}){_ORD}\s*(?P<sep1>and|to|-|\u2013)\s*(?P<b1>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<m1>{_MONTH})"
    rf"|(?P<m2>{_MONTH})\s+(?P<a2>\d{{1,2}}){_ORD}\s*(?P<sep2>and|to|-|\u2013)\s*(?P<b2>\d{{1,2}}){_ORD}\b(?!\s+{_MONTH})){_YEAR_AFTER}\b",
    re.I,
)
_Q_DAY_REACH = re.compile(
    rf"\b(?:{_N}\s+)?(?P<unit>days?|weeks?|weekend|months?|{'|'.join(_WEEKDAYS)})\s+(?P<way>before|after)\s+(?:on\s+)?$", re.I
)
_Q_BETWEEN = re.compile(r"\b(?:between|from)\s+$", re.I)
_Q_SINCE = re.compile(r"\bsince\s+(?:on\s+)?$", re.I)
_Q_LAST = re.compile(r"\b(?P<phrase>yesterday|last week|last weekend|last month|last year|this year|this month|this week)\b", re.I)
_MAY_THE_VERB = re.compile(r"\s+(?:be|been|have|not|need|want|also|help|I|we|you|he|she|they|it)\b", re.I)
# A question about what is to come ("What am I doing in November?", "What will I do in June?"): a
# month, day or season without a year is then not last year's. Wider than the messages' _AHEAD: a
# question puts its subject after the verb ("am I doing"). A question telling of the past ("What did
# I have to do in May?", "Remind me what we talked about on August 3") looks back whatever it holds.
_Q_AHEAD = re.compile(
    r"\b(?:will|shall|going to|gonna|plan|plans|planning|planned|upcoming|coming up|remind me|need to|have to|should)\b|'ll\b"
    r"|\b(?:am|are|is)\s+(?:I|we|you|he|she|they|it)\s+\w+ing\b|\b(?:'m|am|are|is)\s+(?!\w*thing\b)\w+ing\b",
    re.I,
)
# Another year than a month's or day's own: "in May of 2021" is read whole, but "In 2021, what did I
# do in May?", "on May 3 last year", "in the summer two years ago" name a span this does not read.
_Q_OTHER_YEAR = re.compile(r"\b(?:19|20)\d\d\b|\blast year\b|\byears? ago\b|\byear before\b", re.I)
# "in the last month" is the thirty days before; "my last week at the old job", "the last year we
# went to Paris" is a final one, not a span this reads.
_Q_IN_THE = re.compile(r"\b(?:in|over|during|within|for|from|to)\s+the\s+(?:past\s+)?\Z", re.I)


def _month_span(year: int, month: int, months: int = 1) -> tuple[datetime, datetime]:
    start = datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1)
    end_month = month + months
    end = datetime(year + (end_month - 1) // 12, (end_month - 1) % 12 + 1, 1)
    return start, end


def _latest_season(season: str, now: datetime, *, ended: bool) -> tuple[datetime, datetime]:
    """The latest ``season`` that had ended by ``now`` (``ended``) or had begun by it."""
    first, end = _SEASONS[season]
    for year in (now.year, now.year - 1, now.year - 2):
        start, stop = _month_span(year, first, end - first)
        if (stop <= now) if ended else (start <= now):
            return start, stop
    return _month_span(now.year - 2, first, end - first)


def _other_year_beside(question: str, *matches: re.Match) -> bool:
    """Whether ``question`` names a year (or "last year", "two years ago") outside ``matches``."""
    rest = question
    for m in sorted(matches, key=lambda m: -m.start()):
        rest = rest[: m.start()] + " " + rest[m.end() :]
    return _Q_OTHER_YEAR.search(rest) is not None


_PERFECT_DONE = re.compile(r"\b(?:have|has)\s+(?:been|done|gone|had|made|seen|said|told|bought|(?!planned|scheduled|arranged|booked|lined)\w+ed)\b", re.I)  # "should I have done"; not "have planned"


def _looks_ahead(question: str) -> bool:
    return _Q_AHEAD.search(question) is not None and not _PAST.search(question) and not _PERFECT_DONE.search(question)


def question_range(question: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The span of time ``question`` (asked at ``now``) is about, ``(since, until)`` with ``until``
    exclusive, in ``now``'s time zone; None when it names none, or none read for sure (a wrong span
    ranks the wrong messages up). A month, day or season without a year is its latest one before
    ``now``: not in a question about what is to come, nor beside another year. A reading that fails
    gives None, never an error: a message's time comes from its sender, and one at the calendar's
    edge ("in December" asked on 31 December 9999, a client's zero time 0001-01-01) must still be
    answered."""
    try:
        return _question_range(question, now)
    except Exception:
        log.warning("No span read for the question: the rule failed (asked at %s)", now.isoformat(), exc_info=True)
        return None


def _question_range(question: str, now: datetime) -> tuple[datetime, datetime] | None:
    tz = now.tzinfo
    day = datetime(now.year, now.month, now.day)

    def span(found: tuple[datetime, datetime] | None, *, to_now: bool = False) -> tuple[datetime, datetime] | None:
        if found is None:
            return None
        start, end = found[0], day + timedelta(days=1) if to_now else found[1]
        return (start.replace(tzinfo=tz), end.replace(tzinfo=tz)) if start < end else None  # "since May 2024" asked in January: none

    def yearless_stands(*matches: re.Match, ahead_matters: bool = True) -> bool:
        return not (ahead_matters and _looks_ahead(question)) and not _other_year_beside(question, *matches)

    if named := _named_days(question, day):
        found, matches, year_written, since = named
        return span(found, to_now=since) if year_written or yearless_stands(*matches) else None
    m = _Q_LAST.search(question)
    if m and _names_no_time(question, m):
        return None
    phrase = m.group("phrase").casefold() if m else ""
    if phrase.startswith("last ") and re.match(r"\s+of\b", question[m.end() :]):
        m = None  # "the last week of April": April's own (below)
    elif phrase.startswith("last ") and _after_the(question, m.start()):
        if not _Q_IN_THE.search(question, max(0, m.start() - 24), m.start()):
            return None  # "my last week at the old job": a final one
        days = {"last week": 7, "last weekend": 7, "last month": 30, "last year": 365}[phrase]
        return span((day - timedelta(days=days), day + timedelta(days=1)))
    if m:
        monday = day - timedelta(days=day.weekday())
        found = {
            "yesterday": (day - timedelta(days=1), day),
            "last week": (monday - timedelta(days=7), monday),
            "last weekend": (monday - timedelta(days=7), monday),
            "this week": (monday, day + timedelta(days=1)),
            "last month": _month_span(now.year, now.month - 1),
            "this month": _month_span(now.year, now.month),
            "last year": (datetime(now.year - 1, 1, 1), datetime(now.year, 1, 1)),
            "this year": (datetime(now.year, 1, 1), day + timedelta(days=1)),
        }[phrase]
        return span(found, to_now=_Q_SINCE.search(question[: m.start()]) is not None)  # "since last month": to now
    if m := _Q_MONTH.search(question):
        if not (m.group("year") or yearless_stands(m)):
            return None
        month = _MONTHS.index(m.group("month").casefold()) + 1
        year = int(m.group("year")) if m.group("year") else (now.year if month <= now.month else now.year - 1)
        return span(_month_span(year, month), to_now=m.group("prep").casefold() == "since")  # "since May": to now
    if (m := _Q_SEASON.search(question)) and (m.group("which") or m.group("year")):
        season = m.group("season").casefold()
        if m.group("year"):
            first, end = _SEASONS[season]
            return span(_month_span(int(m.group("year")), first, end - first))
        which = m.group("which").casefold()
        if _names_no_time(question, m) or (which == "last" and _after_the(question, m.start("which"))):
            return None  # "I Know What You Did Last Summer", "my last summer in Spain"
        if not yearless_stands(m, ahead_matters=which != "last"):  # "last summer" is past, however asked
            return None
        start, end = _latest_season(season, day, ended=which == "last")
        if which == "this" and start < day - timedelta(days=270):
            return None  # "this summer" asked in May: the coming one, not last year's
        return span((start, end))
    if m := _Q_YEAR.search(question):
        year = int(m.group("year"))
        return span((datetime(year, 1, 1), datetime(year + 1, 1, 1)))
    return None


def _a_month(m: re.Match, *groups: str) -> bool:
    """Whether the month of ``m`` is one: "may" written small before a verb or a pronoun is the verb
    ("the 2 may be", "between 1 and 2 may I ask"); "On 8 May we went" is the month."""
    g = next(g for g in groups if m.group(g))
    return m.group(g) != "may" or not _MAY_THE_VERB.match(m.string, m.end(g))


def _q_days(question: str) -> list[re.Match]:
    return [m for m in _Q_DAY.finditer(question) if _a_month(m, "m1", "m2")]


def _q_day_range(question: str) -> re.Match | None:
    for r in _Q_DAY_RANGE.finditer(question):
        sep = (r.group("sep1") or r.group("sep2")).casefold()
        if _a_month(r, "m1", "m2") and (sep in ("-", "\u2013") or r.group("lead")):
            return r
    return None


def _day_in(month: int, number: int, year: int | None, today: datetime) -> datetime | None:
    """The day ``number`` of ``month`` in ``year``; without one, its latest up to ``today``."""
    for y in [year] if year else [today.year, today.year - 1]:
        try:
            named = datetime(y, month, number)
        except ValueError:  # "February 30"
            return None
        if year or named <= today:
            return named
    return None


def _month_of(m: re.Match, *groups: str) -> int:
    return _MONTHS.index(next(m.group(g) for g in groups if m.group(g)).casefold()) + 1


def _named_days(question: str, today: datetime) -> tuple[tuple[datetime, datetime], tuple[re.Match, ...], bool, bool] | None:
    """The span of a day (or two) the question names, the matches naming it, whether a year was
    written, and whether it runs to now ("since May 5"). The day itself is always in it: what was
    said on 7 July is what a question "on 7 July" (or "as of", "by", "the week before" 7 July) finds
    first. "between 11 and 15 August" and "between March 1 and March 5, 2022" run from the first day
    to the second; a year written once serves the other day (across a new year: "between December 28
    and January 3, 2023")."""
    if r := _q_day_range(question):
        month, year = _month_of(r, "m1", "m2"), int(r.group("year")) if r.group("year") else None
        first = _day_in(month, int(r.group("a1") or r.group("a2")), year, today)
        last = first and _day_in(month, int(r.group("b1") or r.group("b2")), first.year, today)
        if not first or not last or last < first:
            return None
        return (first, last + timedelta(days=1)), (r,), year is not None, False
    found = [(m, d) for m in _q_days(question) if (d := _day_in(*_day_named(m), today))]
    if not found:
        return None
    (m, named), later = found[0], found[1:]
    if later and _Q_BETWEEN.search(question[: m.start()]):
        m2 = later[0][0]
        first, last = _span_ends(m, m2, today)
        if not first or not last or last < first:
            return None
        return (first, last + timedelta(days=1)), (m, m2), bool(m.group("year") or m2.group("year")), False
    if _Q_SINCE.search(question[: m.start()]):
        return (named, today + timedelta(days=1)), (m,), bool(m.group("year")), True
    start, end = named, named + timedelta(days=1)
    if reach := _Q_DAY_REACH.search(question[: m.start()]):
        unit = reach.group("unit").casefold().rstrip("s")
        n = _count(reach.group("n")) if reach.group("n") else 1
        days = {"day": 1, "week": 7, "weekend": 7, "month": 31}.get(unit, 7) * n  # a weekday: within the week
        if reach.group("way").casefold() == "before":
            start = named - timedelta(days=days)
        else:
            end = named + timedelta(days=days + 1)
    return (start, end), (m,), bool(m.group("year")), False


def _day_named(m: re.Match) -> tuple[int, int, int | None]:
    """(month, day, year or None) of a ``_Q_DAY`` match."""
    return _month_of(m, "m1", "m2"), int(m.group("d1") or m.group("d2")), int(m.group("year")) if m.group("year") else None


def _span_ends(m: re.Match, m2: re.Match, today: datetime) -> tuple[datetime | None, datetime | None]:
    """The two days of "between A and B": a year written on one end only serves the other, which is
    then the latest such day not after (for the first) or the first not before (for the second) it."""
    (a_month, a_day, a_year), (b_month, b_day, b_year) = _day_named(m), _day_named(m2)
    crosses = b_month < a_month  # a new year between them ("December 28 and January 3"); within a month, none
    if a_year and not b_year:
        return _day_in(a_month, a_day, a_year, today), _day_in(b_month, b_day, a_year + crosses, today)
    if b_year and not a_year:
        return _day_in(a_month, a_day, b_year - crosses, today), _day_in(b_month, b_day, b_year, today)
    return _day_in(a_month, a_day, a_year, today), _day_in(b_month, b_day, b_year, today)


def names_a_date(question: str) -> bool:
    """Whether ``question`` names a day, a month or a year ("on 7 May", "of November 2023", "in
    2022", "August 11-15"): only then are the dates messages meant searched with their words
    (``storage.episodes``), so "I may have told you" does not find every message dated in May."""
    return bool(_q_days(question) or _q_day_range(question) or _Q_MONTH.search(question) or _Q_YEAR.search(question))
