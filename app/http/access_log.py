"""uvicorn's access log without query-string values (``memory-agent serve`` installs it).

A client may put a secret where it does not belong (``/chats?api_key=ma_…``): the API
refuses it (keys travel only in headers), and the log must not keep it either. Each
``name=value`` of the query is logged as ``name=…``; the path is kept as sent.
"""

from __future__ import annotations

import copy
import logging
from urllib.parse import parse_qsl

from uvicorn.config import LOGGING_CONFIG

ACCESS_LOGGER = "uvicorn.access"
_PATH_ARG = 2  # uvicorn logs '%s - "%s %s HTTP/%s" %d' % (client, method, path?query, version, status)


def redacted(path_with_query: str) -> str:
    path, sep, query = path_with_query.partition("?")
    if not sep:
        return path
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    return f"{path}?{'&'.join(f'{name}=…' for name in names)}" if names else f"{path}?…"


class RedactQueryValues(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > _PATH_ARG and isinstance(args[_PATH_ARG], str):
            record.args = (*args[:_PATH_ARG], redacted(args[_PATH_ARG]), *args[_PATH_ARG + 1 :])
        return True


def log_config() -> dict:
    """uvicorn's default logging set-up with :class:`RedactQueryValues` on the access handler."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query"] = {"()": f"{__name__}.RedactQueryValues"}
    config["handlers"]["access"]["filters"] = ["redact_query"]
    return config
