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

from core.past_dates import weekday_of_next_week
from core.text_validation import TEXT_CHARS

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
    r"noon|midnight|\d{1,2}(?::\d{2})?\s?(?:am|pm)|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.-]\d{1,2}(?:[/.-]\d{2,4})?|"
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
# "next Friday" said on a Thursday is the Friday of next week (8 days on), not tomorrow: the common
# reading. dateparser takes the coming Friday, so "next <weekday>" is read as a past message's is
# (core.past_dates.weekday_of_next_week): that weekday in the (Monday-first) week after.
# "this Friday", "on Friday", "Friday": the coming one.
_NEXT_WEEKDAY = re.compile(rf"\bnext ({WEEKDAYS})\b", re.I)
# "on the 1st", "by the 15th of the month": the next day of a month with that number, today included.
_ORDINAL_DAY = re.compile(r"\bthe (\d{1,2})(?:st|nd|rd|th)(?: of (?:the |this |each |every )?(?P<next>next )?month)?\b", re.I)
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
    return f"{year:04d}-W{week:02d}"


def _end_of(unit: str, later: bool, today: date) -> str:
    if unit == "week":
        return _iso_week(today + timedelta(weeks=1 if later else 0))
    if unit == "month":
        month = today.month + (1 if later else 0)
        return f"{today.year + (month - 1) // 12:04d}-{(month - 1) % 12 + 1:02d}"
    return f"{today.year + (1 if later else 0):04d}"


def _day_of_month(number: int, today: date, *, later: bool = False) -> date | None:
    """The first day numbered ``number`` from ``today`` on (from next month on when ``later``);
    months without it are skipped ("the 31st" said in November is 31 December)."""
    if not 1 <= number <= 31:
        return None
    year, month = today.year, today.month + (1 if later else 0)
    for _ in range(14):
        year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
        try:
            day = date(year, month, number)
        except ValueError:  # no 31st (or 30th) in this month
            day = None
        if day is not None and day >= today:
            return day
        month += 1
    return None


# A whole number alone that is not a year of four digits ("2027" is read as that year). "24.12" is
# a day and month where the user's language writes them so, and stays dateparser's.
_BARE_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,3}|[0-9]{5,})")


def resolve_date(words: str | None, said_at: datetime, languages: Iterable[str] = ("en",)) -> str | None:
    """The ISO date ``words`` meant when said at ``said_at`` ("next Tuesday" on Wed 2026-11-25 →
    "2026-12-01"; "next month" → "2026-12"), or None when they name no date dateparser knows, or
    one outside the years 1 to 9999 ("next week" said on 31 December 9999: a sender's time can be
    anything an ISO time can be)."""
    try:
        found = _resolve_date(words, said_at, languages)
    except (ValueError, OverflowError):  # a day before 1 January 1 or after 31 December 9999
        return None
    return found if found is None or re.fullmatch(ISO_DATE, found) else None


def _resolve_date(words: str | None, said_at: datetime, languages: Iterable[str]) -> str | None:
    words = (words or "").strip()
    if not words:
        return None
    base = (said_at if said_at.tzinfo else said_at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).replace(tzinfo=None)
    weekday = _NEXT_WEEKDAY.search(words)
    if weekday:
        return weekday_of_next_week(weekday.group(1), base.date()).isoformat()
    ordinal = _ORDINAL_DAY.search(words)
    if ordinal and not re.search(rf"\b(?:{MONTHS})\b", words, re.I):  # "the 3rd of December" is dateparser's
        day = _day_of_month(int(ordinal.group(1)), base.date(), later=bool(ordinal.group("next")))
        return day.isoformat() if day else None
    if _BARE_NUMBER.fullmatch(re.sub(r"^(?:by|on|before|until|due)\s+", "", words, flags=re.I)):
        return None  # "1", "-1", "99": dateparser read a month, a year or a day; no one knows which was meant
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
        return f"{when.year:04d}"
    if period == "month":
        return f"{when.year:04d}-{when.month:02d}"
    if period == "week" and _A_WEEK.search(words):
        return _iso_week(when.date())
    return when.date().isoformat()


def prepare_date_parsing() -> None:
    """Pay dateparser's one-off costs now: its import and the regexes it builds on its first parse
    (time zones, English's simplifications): ~0.5 s of CPU, which the first turn naming a date in
    a server's worker would otherwise spend inside the event loop that all its turns share."""
    resolve_date("by the 3rd of December next year", datetime(2026, 1, 1, tzinfo=timezone.utc))


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


def human_date(iso: str) -> str:
    """A resolved date as people read it: "2026-12-04" → "Fri 4 Dec 2026", "2026-W49" → "the week of
    Mon 30 Nov 2026", "2026-12" → "December 2026", "2027" unchanged; anything else unchanged."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", iso):
            day = date.fromisoformat(iso)
            return f"{day:%a} {day.day} {day:%b %Y}"
        if re.fullmatch(r"\d{4}-W\d{2}", iso):
            monday = date.fromisocalendar(int(iso[:4]), int(iso[6:]), 1)
            return f"the week of {human_date(monday.isoformat())}"
        if re.fullmatch(r"\d{4}-\d{2}", iso):
            return f"{date(int(iso[:4]), int(iso[5:]), 1):%B %Y}"
    except ValueError:
        pass
    return iso


_CLOCK = re.compile(r"\b(?:\d{1,2}(?::\d{2})?\s?(?:am|pm)|noon|midnight)\b", re.I)
_PART_OF_DAY_WORD = re.compile(rf"\b({PART_OF_DAY})\b|\b(tonight)\b", re.I)
_DEADLINE = re.compile(r"\b(by|before|until|till)\s+$", re.I)
_PREPOSITION = re.compile(r"\b(?:on|by|before|until|till|due|for|in|at)\s+$", re.I)
_ENGLISH_WORDS = re.compile(r"^[\x00-\x7f]+$")
_NOT_ENGLISH = re.compile(r"\b(?:domani|stasera|oggi|entro)\b", re.I)


def _date_phrase(due: str, due_date: str, deadline: str | None) -> str:
    """The resolved date in prose, with a preposition: "on Fri 4 Dec 2026", "by the end of December 2026"."""
    human = human_date(due_date)
    if re.search(r"\bend of\b", due, re.I):
        if "-W" in due_date:  # the end of a week is its Sunday
            sunday = date.fromisocalendar(int(due_date[:4]), int(due_date[6:]), 7)
            return f"{deadline or 'by'} {human_date(sunday.isoformat())}"
        return f"{deadline or 'by'} the end of {human}"
    if deadline:
        return f"{deadline} {human}"
    phrase = f"on {human}" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", due_date) else f"in {human}"
    clock, part = _CLOCK.search(due), _PART_OF_DAY_WORD.search(due)
    if part:  # the time of day stays: "tomorrow morning" → "on Fri 27 Nov 2026 in the morning"
        phrase += f" in the {(part.group(1) or 'evening').lower()}"
    if clock:
        phrase += f" at {clock.group(0)}"
    return phrase


def dated_task(description: str, due: str | None, due_date: str | None) -> str:
    """A task's text with the date its due words meant in place of them, so it reads true later:
    ("call the dentist next Friday", "next Friday", "2026-12-04") → "Call the dentist on Fri 4 Dec 2026".
    Words not in the text get the date added; words in another language keep their place, the date
    beside them; a text that already carries the date is unchanged."""
    if not due or not due_date or human_date(due_date) in description:
        return description
    m = re.search(rf"(?<!\w){re.escape(due.strip())}(?!\w)", description, re.I)
    if not _ENGLISH_WORDS.match(due) or _NOT_ENGLISH.search(due):
        at = m.end() if m else len(description)
        return f"{description[:at]} ({human_date(due_date)}){description[at:]}"
    if m is None:
        return _upper_first(f"{description.rstrip(' .')} {_date_phrase(due, due_date, None)}")
    before = description[: m.start()]
    deadline = _DEADLINE.search(before)
    said = _PREPOSITION.search(before)
    if said:
        before = before[: said.start()]
    phrase = _date_phrase(due, due_date, deadline.group(1).lower() if deadline else None)
    return _upper_first(f"{before}{phrase}{description[m.end():]}")


def redated_task(description: str, old_due: str | None, old_due_date: str | None, due: str | None, due_date: str | None) -> str:
    """A dated task's text after its due date is changed: the old date's phrase as :func:`dated_task`
    wrote it ("on Fri 4 Dec 2026 in the morning", "by …", "in …", or the words of another language
    with the date beside them, "domani (Fri 4 Dec 2026)") gives way to the new one; a text that
    never carried the old date is kept as is."""
    if not old_due_date or old_due_date == due_date or human_date(old_due_date) not in description:
        return description
    when = rf"(?:the end of )?{re.escape(human_date(old_due_date))}"
    # What _date_phrase added after the date for the old due's time of day, and the old words beside
    # a bracketed date: neither may stay behind, or each change of the due date left one more ("in
    # the evening in the morning …"). A time of day the user wrote themselves stays.
    said = old_due or ""
    time_of_day = (rf"(?:\s+in the (?:{PART_OF_DAY}))?" if _PART_OF_DAY_WORD.search(said) else "") + (
        rf"(?:\s+at\s+(?:{_CLOCK.pattern}))?" if _CLOCK.search(said) else ""
    )
    words_beside = rf"(?:{re.escape(said.strip())}\s*)?" if said.strip() else ""
    old = re.compile(rf"(\s*)(?:{words_beside}\({when}\)|(?:\b(on|by|before|until|till|in)\s+)?{when}{time_of_day})", re.I)
    if not (due and due_date):
        return old.sub("", description, count=1).strip()
    # The new words where the old date was, after its preposition ("by"), then dated as any task's.
    def words(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2) + ' ' if (m.group(2) or '').lower() in ('by', 'before', 'until', 'till') else ''}{due}"

    redated = dated_task(old.sub(words, description, count=1), due, due_date)
    # A text the new phrase would take past a task's limit keeps its words (its due date is the new one).
    return redated if len(redated) <= TEXT_CHARS else description


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def due_phrase(due: str | None, due_date: str | None) -> str:
    """How a due date is shown: the date it meant, as people read it ("Fri 4 Dec 2026"); the user's
    words when they meant no date ("someday"). The words stay in the task's ``due``."""
    if due_date:
        return human_date(due_date)
    return due or ""
