"""Numbers read from environment settings. A value that is no number, or out of its range, is a
SettingError naming the variable and what it takes, which every command prints as one line and
stops on (a float() of it at import was a traceback, and in a serve worker a crash loop)."""

from __future__ import annotations

import math
import os

from core.errors import SettingError


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def env_seconds(name: str, default: float) -> float:
    """Seconds, more than 0 (unset or empty: ``default``)."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SettingError(f"{name}={raw!r}: give a number of seconds above 0 (default {default:g})")
    return value


def env_whole(name: str, default: int, *, least: int = 0, what: str = "a whole number") -> int:
    """A whole number, at least ``least`` (unset or empty: ``default``)."""
    raw = _raw(name)
    if not raw:
        return default
    if not raw.isascii() or not raw.isdigit() or int(raw) < least:
        raise SettingError(f"{name}={raw!r}: give {what}, {least} or more (default {default})")
    return int(raw)
