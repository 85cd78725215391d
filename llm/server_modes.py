"""What each server takes for structured output, learned once per (model, base URL) and kept.

A server that refuses a structured-output mode refuses it every time: llama-cpp-python's
server answers ``json_schema`` with HTTP 500 today and tomorrow. So what a call learns (the
modes a server refused, and those it accepted) is kept here for the process and, when an
entry point asks for it (``keep_in``: the CLI does), in a small JSON file in the user's cache
folder, so a later process starts at the mode that works and never sends the refused one again.

Why a file and not Postgres: it describes a model server as seen from this machine, not a
user's memory (forget-me must not touch it, and it must not differ per database); it is needed
where no database pool is at hand (``llm.structured`` is called with a model, nothing else);
and it is a cache: deleting it only costs one refused request per server. Several processes may
write it: each write merges with what is on disk and replaces the file atomically, so the worst
a race can do is drop an entry, learned again by the next call.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

log = logging.getLogger(__name__)

FILE_NAME = "structured-output.json"
MAX_ENTRIES = 200  # a local server on a new port each run is a new entry: the oldest go first
TWINS = {"auto": "json_schema", "json_schema": "auto"}  # the same request for OpenAI-compatible servers


class ServerEntry(BaseModel):
    """What one model at one base URL took and refused (the file's JSON contract)."""

    model: str
    server: str | None = None  # None: the provider's default endpoint
    accepted: list[str] = Field(default_factory=list)
    refused: dict[str, str] = Field(default_factory=dict)  # mode -> the server's reason, shortened
    updated_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))


class ServerModesFile(BaseModel):
    version: Literal[1] = 1
    servers: list[ServerEntry] = Field(default_factory=list)


Key = tuple[str, str | None]


@dataclass
class _Known:
    accepted: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)


_lock = threading.Lock()
_known: dict[Key, _Known] = {}
_path: Path | None = None


def default_path() -> Path:
    """``$MEMORY_AGENT_CACHE/structured-output.json`` (default: the user cache folder, ``~/.cache/memory-agent`` on Linux)."""
    configured = os.environ.get("MEMORY_AGENT_CACHE")
    if configured:
        return Path(configured).expanduser() / FILE_NAME
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("memory-agent", appauthor=False)) / FILE_NAME


def keep_in(path: Path | None) -> None:
    """Keep what is learned in ``path`` (None: in this process only, the default) and load what it holds."""
    global _path
    with _lock:
        _path = path
        if path is not None:
            for entry in _read(path).servers:
                known = _known.setdefault((entry.model, entry.server), _Known())
                known.accepted |= set(entry.accepted)
                known.refused.update(entry.refused)


def kept_in() -> Path | None:
    return _path


def forget() -> None:
    """Forget everything learned, in the process and in the file (a server that was upgraded may take more)."""
    with _lock:
        _known.clear()
        if _path is not None:
            _path.unlink(missing_ok=True)


def is_refused(key: Key, mode: str) -> bool:
    with _lock:
        known = _known.get(key)
        return known is not None and (mode in known.refused or TWINS.get(mode, "") in known.refused)


def is_known(key: Key, mode: str) -> bool:
    """Whether this server was seen to take or refuse ``mode`` (a mode never tried is probed without retries)."""
    with _lock:
        known = _known.get(key)
        if known is None:
            return False
        names = {mode, TWINS.get(mode, mode)}
        return bool(names & known.accepted) or bool(names & set(known.refused))


def any_refused(key: Key) -> bool:
    with _lock:
        known = _known.get(key)
        return bool(known and known.refused)


def learn(key: Key, mode: str, *, refused: str | None = None) -> bool:
    """Record that the server took ``mode`` (or refused it, with the reason). True when this is news."""
    with _lock:
        known = _known.setdefault(key, _Known())
        if refused is None:
            if mode in known.accepted:
                return False
            known.accepted.add(mode)
        else:
            if mode in known.refused:
                return False
            known.refused[mode] = refused[:300]
            known.accepted.discard(mode)
        path, snapshot = _path, ServerEntry(model=key[0], server=key[1], accepted=sorted(known.accepted), refused=dict(known.refused))
    if path is not None:
        _write_merged(path, snapshot)
    return True


def _read(path: Path) -> ServerModesFile:
    try:
        return ServerModesFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return ServerModesFile()
    except (OSError, ValidationError, ValueError) as exc:
        # A cache: an unreadable one is learned again, not an error for the user.
        log.info("ignoring the structured-output cache %s (%s); it is learned again", path, str(exc)[:200])
        return ServerModesFile()


def _write_merged(path: Path, entry: ServerEntry) -> None:
    try:
        on_disk = _read(path)
        others = [e for e in on_disk.servers if (e.model, e.server) != (entry.model, entry.server)]
        servers = sorted([*others, entry], key=lambda e: e.updated_at)[-MAX_ENTRIES:]
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".structured-output-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(ServerModesFile(servers=servers).model_dump_json(indent=1))
            os.replace(tmp, path)  # readers see the old file or the new one, never half of one
        finally:
            Path(tmp).unlink(missing_ok=True)  # gone already when replaced
    except OSError as exc:
        log.info("could not keep the structured-output cache in %s (%s); this process still knows", path, exc)
