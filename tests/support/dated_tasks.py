"""The text a task said today is stored under: its due words replaced by the date they meant (issue 30),
so tests that run on any day compare with the date of the day they run."""

from __future__ import annotations

from datetime import datetime, timezone

from core.dates import dated_task, resolve_date


def dated_now(text: str, due: str) -> str:
    """`text` as the writer stores it when said now, with `due` ("next week", "May 20") resolved."""
    return dated_task(text, due, resolve_date(due, datetime.now(timezone.utc)))
