"""Time ranges of the history search: what a ``time_range`` (from the model's tool or an MCP client) means
as a UTC window, or an ``InvalidTimeRange`` saying why it means none. One parser, so every entry point
refuses the same values the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from core.errors import MemoryAgentError
from core.schemas import ChatRecord, utcnow


class InvalidTimeRange(MemoryAgentError, ValueError):
    """A time_range the parser does not understand."""


@dataclass(frozen=True)
class TimeWindow:
    start: datetime | None
    end: datetime | None
    label: str

    def admits(self, chat: ChatRecord) -> bool:
        """A chat belongs to the window when it was active in it."""
        return (self.start is None or chat.last_activity >= self.start) and (self.end is None or chat.created_at < self.end)


TIME_RANGE_HELP = (
    "'all'; 'today'; 'yesterday'; the last N hours/days/weeks/months as '24h', '7d', '2w', '3m'; "
    "a day 'YYYY-MM-DD'; or a span 'YYYY-MM-DD..YYYY-MM-DD' (either end may be left out; ends inclusive, UTC)"
)
_RELATIVE = re.compile(r"^(?:last[ _-]?)?(\d+)\s*(h|hours?|d|days?|w|weeks?|m|months?)$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UNIT_DAYS = {"h": 1 / 24, "d": 1, "w": 7, "m": 30}


def _midnight(d: date) -> datetime:
    return datetime.combine(d, time.min, tzinfo=timezone.utc)


def _parse_point(text: str, *, end: bool) -> datetime:
    """A date (whole day; the end of a span includes it) or an ISO datetime, in UTC."""
    try:
        if _DAY.match(text):
            day = _midnight(date.fromisoformat(text))
            return day + timedelta(days=1) if end else day
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidTimeRange(f"'{text}' is not a date; time_range accepts {TIME_RANGE_HELP}") from exc
    # In UTC here, so a moment whose UTC leaves years 1-9999 fails now, not later in a comparison or the SQL.
    return moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def parse_time_range(spec: str | None, now: datetime | None = None) -> TimeWindow:
    """The UTC window a time_range names; anything else, however odd, is an InvalidTimeRange saying why."""
    try:
        return _parse_time_range(spec, now or utcnow())
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, InvalidTimeRange):
            raise
        # 99999999999d, 9999-12-31 (its day ends in year 10000), a 5,000-digit count: past what a date can hold.
        raise InvalidTimeRange(
            f"time_range '{_shown(spec)}' reaches outside the years 1-9999 (UTC); use 'all' or a narrower range: {TIME_RANGE_HELP}"
        ) from exc


def _shown(spec: str | None) -> str:
    text = spec or ""
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_time_range(spec: str | None, now: datetime) -> TimeWindow:
    text = (spec or "").strip().lower()
    if text in ("", "all", "any", "all_time"):
        return TimeWindow(None, None, "all")
    today = _midnight(now.date())
    if text == "today":
        return TimeWindow(today, None, "today")
    if text == "yesterday":
        return TimeWindow(today - timedelta(days=1), today, "yesterday")
    relative = _RELATIVE.match(text.replace(" ", ""))
    if relative:
        count, unit = int(relative.group(1)), relative.group(2)[0]
        return TimeWindow(now - timedelta(days=count * _UNIT_DAYS[unit]), None, f"last {count}{unit}")
    if ".." in text:
        left, right = (part.strip() for part in text.split("..", 1))
        start = _parse_point(left, end=False) if left else None
        end = _parse_point(right, end=True) if right else None
        if start and end and start >= end:
            raise InvalidTimeRange(f"time_range '{spec}' ends before it starts")
        return TimeWindow(start, end, f"{left or '…'}..{right or '…'}")
    if _DAY.match(text):
        start = _parse_point(text, end=False)
        return TimeWindow(start, start + timedelta(days=1), text)
    raise InvalidTimeRange(f"time_range '{spec}' is not understood; use {TIME_RANGE_HELP}")
