"""Dates of the past, as said and as asked.

Two jobs, both against the time something was said, never the wall clock:

* :func:`resolve_relative`: a relative phrase in a past message ("yesterday", "last week",
  "two days ago") gets the date it meant beside it, so an excerpt read months later still
  says when: "yesterday" said on 8 May 2023 reads "yesterday (7 May 2023)";
* :func:`question_range`: the span of time a question asks about ("in May", "last spring",
  "in 2022", "last week"), as ``(since, until)``, for a search of that span.

English only, rules only (no parser): the phrases people use for the recent past. Dates are
written as people (and LoCoMo's answers) write them: "7 May 2023".
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

__all__ = ["resolve_relative", "question_range", "day_text"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "fall": (9, 12), "autumn": (9, 12), "winter": (12, 15)}  # months [start, end)
_N = r"(?P<n>\d{1,2}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"


def day_text(when: datetime) -> str:
    return f"{when.day} {when:%B %Y}"


def _month_text(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{_MONTHS[month - 1].capitalize()} {year}"


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.casefold()]


def _weekday_before(said: datetime, name: str) -> datetime:
    back = (said.weekday() - _WEEKDAYS.index(name.casefold())) % 7 or 7
    return said - timedelta(days=back)


def _resolved(m: re.Match, said: datetime) -> str | None:
    phrase = m.group(0).casefold()
    if phrase in ("yesterday", "last night"):
        return day_text(said - timedelta(days=1))
    if phrase == "the day before yesterday":
        return day_text(said - timedelta(days=2))
    if phrase == "tomorrow":
        return day_text(said + timedelta(days=1))
    if phrase in ("last week", "the week before", "the other week"):
        return f"the week before {day_text(said)}"
    if phrase == "last weekend":
        return f"the weekend before {day_text(said)}"
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
    if m.group("season"):
        season = m.group("season").casefold()
        start, _ = _latest_season(season, said.replace(tzinfo=None), ended=True)
        return f"{season} {start.year}"
    if m.group("unit"):
        n, unit = _count(m.group("n")), m.group("unit").casefold().rstrip("s")
        if unit == "day":
            return day_text(said - timedelta(days=n))
        if unit == "week":
            return f"the week of {day_text(said - timedelta(weeks=n))}"
        if unit == "month":
            return _month_text(said.year, said.month - n)
        if unit == "year":
            return str(said.year - n)
    return None


_RELATIVE = re.compile(
    r"(?<![\w(])(?:yesterday|last night|the day before yesterday|tomorrow|last week|the week before|the other week|last weekend|"
    r"next week|next month|last month|last year|next year|this year|this month|"
    rf"last (?P<weekday>{'|'.join(_WEEKDAYS)})|last (?P<season>spring|summer|fall|autumn|winter)|"
    rf"{_N} (?P<unit>days?|weeks?|months?|years?) ago)(?![\w)]| \()",
    re.I,
)


def resolve_relative(text: str, said: datetime) -> str:
    """``text`` with the date each relative phrase meant after it, in brackets ("yesterday (7 May 2023)")."""

    def sub(m: re.Match) -> str:
        date = _resolved(m, said)
        return f"{m.group(0)} ({date})" if date else m.group(0)

    return _RELATIVE.sub(sub, text)


# --------------------------------------------------------------------------- questions
_Q_MONTH = re.compile(rf"\b(?:in|during|of|since) (?:early |late |mid-?)?(?P<month>{'|'.join(_MONTHS)})(?:,? (?P<year>(?:19|20)\d\d))?\b", re.I)
_Q_YEAR = re.compile(r"\b(?:in|during|of) (?P<year>(?:19|20)\d\d)\b", re.I)
_Q_SEASON = re.compile(r"\b(?:(?P<which>last|this|in|during) )?(?:the )?(?P<season>spring|summer|fall|autumn|winter)(?: of (?P<year>(?:19|20)\d\d))?\b", re.I)
_Q_LAST = re.compile(r"\b(?P<phrase>yesterday|last week|last weekend|last month|last year|this year|this month|this week)\b", re.I)


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


def question_range(question: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The span of time ``question`` (asked at ``now``) is about, ``(since, until)`` with ``until``
    exclusive, in ``now``'s time zone; None when it names none. A month or season without a year
    is its latest one before ``now``."""
    tz = now.tzinfo

    def span(start: datetime, end: datetime) -> tuple[datetime, datetime]:
        return start.replace(tzinfo=tz), end.replace(tzinfo=tz)

    day = datetime(now.year, now.month, now.day)
    if m := _Q_LAST.search(question):
        phrase = m.group("phrase").casefold()
        if phrase == "yesterday":
            return span(day - timedelta(days=1), day)
        if phrase in ("last week", "last weekend"):
            monday = day - timedelta(days=day.weekday())
            return span(monday - timedelta(days=7), monday)
        if phrase == "this week":
            monday = day - timedelta(days=day.weekday())
            return span(monday, day + timedelta(days=1))
        if phrase == "last month":
            return span(*_month_span(now.year, now.month - 1))
        if phrase == "this month":
            return span(*_month_span(now.year, now.month))
        if phrase == "last year":
            return span(datetime(now.year - 1, 1, 1), datetime(now.year, 1, 1))
        if phrase == "this year":
            return span(datetime(now.year, 1, 1), day + timedelta(days=1))
    if m := _Q_MONTH.search(question):
        month = _MONTHS.index(m.group("month").casefold()) + 1
        year = int(m.group("year")) if m.group("year") else (now.year if month <= now.month else now.year - 1)
        return span(*_month_span(year, month))
    if (m := _Q_SEASON.search(question)) and (m.group("which") or m.group("year")):
        season = m.group("season").casefold()
        if m.group("year"):
            first, end = _SEASONS[season]
            return span(*_month_span(int(m.group("year")), first, end - first))
        return span(*_latest_season(season, day, ended=m.group("which").casefold() == "last"))
    if m := _Q_YEAR.search(question):
        year = int(m.group("year"))
        return span(datetime(year, 1, 1), datetime(year + 1, 1, 1))
    return None
