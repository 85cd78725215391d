"""Where the chat writes what is not conversation: its log file and the user's line history.

Both live in the user's state folder: ``$MEMORY_AGENT_STATE_DIR``, by default platformdirs'
user state folder (``~/.local/state/memory-agent`` on Linux). Log records of the libraries and
of the agent (a server refusing a structured-output mode, facts the extraction dropped) go to
``log/chat.log`` there, never into the conversation: the chat shows at most one calm line, at the
first error, saying where the details are. ``memory-agent -v chat`` also prints them on stderr.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Callable

STATE_ENV = "MEMORY_AGENT_STATE_DIR"
LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
LOG_BYTES, LOG_BACKUPS = 1_000_000, 3  # chat.log and three older ones: at most 4 MB


def state_dir() -> Path:
    configured = os.environ.get(STATE_ENV)
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_state_dir

    return Path(user_state_dir("memory-agent", appauthor=False))


def log_path() -> Path:
    return state_dir() / "log" / "chat.log"


NAME_BYTES = 255
"""The longest file name Linux and macOS file systems take, in bytes."""


def history_path(user_id: str) -> Path:
    """The lines a user typed on the terminal (user ids cannot hold '/', '.' or blanks: a safe file name).

    A user id may be 200 characters, which in UTF-8 can be up to 800 bytes: one whose name would not
    fit a file name is kept under its sha256 instead ('.' cannot be in a user id, so no id is that name).
    """
    name = user_id if len(os.fsencode(user_id)) <= NAME_BYTES else f"sha256.{hashlib.sha256(user_id.encode()).hexdigest()}"
    return state_dir() / "history" / name


class PrivateLog(RotatingFileHandler):
    """The chat's log, readable by its user only (0600, as the line history): its tracebacks can hold
    what the user wrote. Each file it opens, a new one after a rollover too, and one made before this."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


class OneCalmLine(logging.Handler):
    """At the first error record, one line in the chat saying where its details are; never a second."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.ERROR)
        self.path = path
        self.said = False
        self.say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)

    def emit(self, record: logging.LogRecord) -> None:
        if self.said:
            return
        self.said = True
        try:
            self.say(f"(Something went wrong; the details are in {self.path}.)")
        except Exception:  # a closed terminal: the file has it all the same
            pass


def log_to_file(verbose: bool = False) -> Path | None:
    """Send every log record (and Python warnings) to the chat's log file instead of the terminal.

    Returns the file, or None when it cannot be written (then records stay on stderr, as before).
    """
    path = log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        to_file = PrivateLog(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8")
    except OSError:
        return None
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    for handler in root.handlers[:]:  # basicConfig's stderr handler
        if not verbose:
            root.removeHandler(handler)
    root.addHandler(to_file)
    root.addHandler(OneCalmLine(path))
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.captureWarnings(True)
    return path
