"""Dates that stay true: "next Tuesday" resolved against the time it was said.

A task "due next Tuesday" still says "next Tuesday" a week later; the date it meant does
not change. The words are kept as the user said them and the date is resolved once, against
the time of the message that said them (``core.messages.sent_at``), never the wall clock
when memory is written or shown. Parsing is dateparser's (offline, many languages); this
module only chooses the languages and turns its answer into an ISO 8601 value whose
precision is the phrase's: a day ``2026-12-01``, a week ``2026-W49``, a month ``2026-12``,
a year ``2027``. Dates are the message's UTC dates (no user time zone is known).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone
from typing import Iterable

# The phrases that name a time, in the words people write them; the rules find due dates with
# these, and facts get a resolved date beside any of them.
WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
PART_OF_DAY = "morning|afternoon|evening|night"
TIME_WORDS = (
    rf"tomorrow(?: (?:{PART_OF_DAY}))?|tonight|today|"
    rf"this (?:{PART_OF_DAY}|week|weekend|month|year|{WEEKDAYS})|"
    rf"next (?:week|weekend|month|year|{WEEKDAYS})|"
    rf"in (?:a|one|two|three|four|five|six|\d{{1,2}}) (?:days?|weeks?|months?)|"
    rf"(?:{WEEKDAYS})(?: (?:{PART_OF_DAY}))?|"
    r"(?:the )?end of (?:the |this |next )?(?:day|week|month|year)|"
    r"noon|midnight|\d{1,2}(?::\d{2})?\s?(?:am|pm)|\d{1,2}[/.-]\d{1,2}(?:[/.-]\d{2,4})?|"
    rf"(?:{MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{MONTHS})|"
    r"domani|stasera|oggi|מחר|היום|הערב"
)
# Relative phrases only (an absolute one, "December 3", needs no anchor to stay true in a fact),
# and no bare weekday: "swims on Friday" is a habit, not a date.
RELATIVE_PHRASE = re.compile(
    rf"(?<!\w)(?:tomorrow|tonight|today|(?:this|next) (?:week|month|year|{WEEKDAYS})|"
    rf"in (?:a|one|two|three|four|five|six|\d{{1,2}}) (?:days?|weeks?|months?)|"
    r"(?:the )?end of (?:the |this |next )?(?:week|month|year)|domani|oggi|מחר|היום)(?!\w)",
    re.I,
)

ISO_DATE = r"^\d{4}(?:-W\d{2}|-\d{2}(?:-\d{2})?)?$"
"""What a resolved date looks like: a day, an ISO week, a month or a year."""

# Languages by the names the profile and preferences hold ("Italian"), as dateparser's codes.
_LANGUAGE_CODES = {
    "english": "en", "italian": "it", "hebrew": "he", "spanish": "es", "french": "fr", "german": "de",
    "portuguese": "pt", "russian": "ru", "arabic": "ar", "chinese": "zh", "japanese": "ja", "dutch": "nl",
    "polish": "pl", "turkish": "tr", "greek": "el", "hindi": "hi", "swedish": "sv", "danish": "da",
    "finnish": "fi", "czech": "cs", "romanian": "ro", "ukrainian": "uk", "hungarian": "hu", "korean": "ko",
    "persian": "fa", "thai": "th", "vietnamese": "vi", "indonesian": "id", "catalan": "ca", "norwegian": "nb",
}  # fmt: skip
_SCRIPTS = (("he", re.compile(r"[\u0590-\u05FF]")), ("ar", re.compile(r"[\u0600-\u06FF]")), ("ru", re.compile(r"[\u0400-\u04FF]")))
_END_OF = re.compile(r"\bend of (?:the |this )?(?P<next>next )?(?P<unit>week|month|year)\b", re.I)
_A_WEEK = re.compile(r"\b(?:this|next|coming) week\b", re.I)


def date_languages(text: str, *language_names: str | None) -> tuple[str, ...]:
    """The languages to read dates in: English, the user's named languages, and the script of ``text``."""
    codes = ["en"]
    for name in language_names:
        code = _LANGUAGE_CODES.get((name or "").strip().casefold())
        if code and code not in codes:
            codes.append(code)
    for code, script in _SCRIPTS:
        if script.search(text) and code not in codes:
            codes.append(code)
    return tuple(codes)


def _iso_week(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def _end_of(unit: str, later: bool, today: date) -> str:
    if unit == "week":
        return _iso_week(today + timedelta(weeks=1 if later else 0))
    if unit == "month":
        month = today.month + (1 if later else 0)
        return f"{today.year + (month - 1) // 12}-{(month - 1) % 12 + 1:02d}"
    return str(today.year + (1 if later else 0))


def resolve_date(words: str | None, said_at: datetime, languages: Iterable[str] = ("en",)) -> str | None:
    """The ISO date ``words`` meant when said at ``said_at`` ("next Tuesday" on Wed 2026-11-25 →
    "2026-12-01"; "next month" → "2026-12"), or None when they name no date dateparser knows."""
    words = (words or "").strip()
    if not words:
        return None
    base = (said_at if said_at.tzinfo else said_at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).replace(tzinfo=None)
    end = _END_OF.search(words)
    if end:  # "by the end of the month": the month itself (dateparser does not read it)
        return _end_of(end.group("unit").lower(), bool(end.group("next")), base.date())
    from dateparser.date import DateDataParser  # 0.2 s to import: only when a date is to be read

    parser = DateDataParser(
        languages=list(languages) or ["en"],
        settings={"RELATIVE_BASE": base, "PREFER_DATES_FROM": "future", "RETURN_TIME_AS_PERIOD": True},
    )
    try:
        found = parser.get_date_data(re.sub(r"^(?:by|on|before|until|due)\s+", "", words, flags=re.I))
    except (ValueError, OverflowError):
        return None
    when, period = found.date_obj, found.period
    if when is None:
        return None
    if period == "year":
        return str(when.year)
    if period == "month":
        return f"{when.year}-{when.month:02d}"
    if period == "week" and _A_WEEK.search(words):
        return _iso_week(when.date())
    return when.date().isoformat()


def dated(text: str, said_at: datetime, languages: Iterable[str] = ("en",)) -> str:
    """``text`` with the date its relative phrase meant beside it ("Exam is next Tuesday (2026-12-01)");
    unchanged when it has none, or already carries one."""
    if re.search(r"\(\d{4}(?:-W?\d{2})?(?:-\d{2})?\)", text):
        return text
    m = RELATIVE_PHRASE.search(text)
    if not m:
        return text
    resolved = resolve_date(m.group(0), said_at, languages)
    if resolved is None:
        return text
    return f"{text[: m.end()]} ({resolved}){text[m.end():]}"


def due_phrase(due: str | None, due_date: str | None) -> str:
    """How a due date is shown: the user's words and the date they meant ("next Tuesday, 2026-12-01")."""
    if due and due_date and due_date not in due:
        return f"{due}, {due_date}"
    return due or due_date or ""
