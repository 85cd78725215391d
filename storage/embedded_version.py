"""Which Postgres major wrote the embedded data directory, and which one is installed.

A Postgres server opens only a data directory of its own major version; when the embedded
Postgres (the ``pgserver`` module) moves to a new major, the previous release's folder must be
upgraded first (``memory-agent migrate``, storage/embedded_upgrade.py). Kept apart from the
upgrade so that storage/postgres.py can refuse such a folder before starting it without
importing the upgrade, which starts the server through storage/postgres.py."""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

from core.errors import DatabaseUnreachable


def data_major(pgdata: Path) -> int | None:
    """The major version that wrote ``pgdata`` (its PG_VERSION file), or None if there is no cluster."""
    try:
        text = (pgdata / "PG_VERSION").read_text().strip()
    except FileNotFoundError:
        return None
    # "16"; before Postgres 10 the major had two parts ("9.6"), which is older in any case.
    try:
        return int(text.split(".")[0])
    except ValueError:  # not a cluster we can judge: let pgserver's start say what is wrong
        return None


@lru_cache(maxsize=None)
def binaries_major(bin_dir: Path) -> int:
    """The major version of the Postgres in ``bin_dir``, from ``postgres --version`` (the binary
    that will run the data, not a file that could disagree with it)."""
    executable = bin_dir / "postgres"
    try:
        done = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise DatabaseUnreachable(f"Cannot run {executable}: {exc}") from exc
    found = re.search(r"\(PostgreSQL\)\s+(\d+)", done.stdout)
    if done.returncode != 0 or not found:
        raise DatabaseUnreachable(f"{executable} --version did not say its version: {(done.stdout + done.stderr).strip()!r}")
    return int(found.group(1))


def installed_bin_dir() -> Path:
    """The binaries of the embedded Postgres this memory-agent runs."""
    from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def refuse_other_major(pgdata: Path) -> None:
    """Raise DatabaseUnreachable when ``pgdata`` holds a cluster of another major than the installed
    binaries (they could not start it, and pgserver would only say that the start failed)."""
    have = data_major(pgdata)
    if have is None:
        refuse_interrupted_swap(pgdata)
        return
    message = mismatch_message(pgdata, have, binaries_major(installed_bin_dir()))
    if message:
        raise DatabaseUnreachable(message)


def mismatch_message(pgdata: Path, have: int, installed: int) -> str | None:
    """What to tell the user when the data's major ``have`` is not the ``installed`` one."""
    if have < installed:
        return (
            f"The embedded Postgres data in {pgdata} was written by PostgreSQL {have}; this memory-agent runs "
            f"PostgreSQL {installed}, which cannot open it. Run `memory-agent migrate` once: it upgrades the folder "
            f"to PostgreSQL {installed} and keeps the old one beside it as a copy (nothing is lost)."
        )
    if have > installed:
        return (
            f"The embedded Postgres data in {pgdata} was written by PostgreSQL {have}, newer than this memory-agent's "
            f"PostgreSQL {installed}; a data folder cannot go back to an older Postgres. Install the memory-agent "
            "release that wrote it, or set MEMORY_AGENT_DATA_DIR to another folder."
        )
    return None


def refuse_interrupted_swap(pgdata: Path) -> None:
    """An upgrade stopped between its two renames leaves no ``pgdata`` but a finished new folder
    beside the kept old one: starting would create an empty cluster and hide both. Say what to do."""
    if pgdata.exists():
        return
    finished = sorted(p for p in pgdata.parent.glob(f"{pgdata.name}.upgrading-pg*") if (p / "PG_VERSION").exists())
    kept = sorted(pgdata.parent.glob(f"{pgdata.name}.pg*-*"))
    if finished and kept:
        raise DatabaseUnreachable(
            f"An upgrade of the embedded Postgres was interrupted after it finished: the upgraded data is in {finished[-1]} "
            f"and the old data in {kept[-1]}, but {pgdata} is missing. Rename {finished[-1].name} to {pgdata.name} to use the "
            "upgraded data (or the old folder back, to use it with the previous release)."
        )
    if kept:
        raise DatabaseUnreachable(
            f"{pgdata} is missing, but {kept[-1]} holds the data an upgrade kept. Rename it to {pgdata.name} (then "
            "`memory-agent migrate` upgrades it again), or move it out of this folder to start with an empty database; "
            "starting now would create an empty one beside it and hide it."
        )
