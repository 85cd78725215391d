"""Where the shared, read-only evaluation data lives.

The data is never copied into the repo. By default it is read from
``<repo root>/../shared/evaldata``; set ``MEMORY_AGENT_EVALDATA`` to point
somewhere else, or pass an explicit path to any loader.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["EVALDATA_ENV", "REPO_ROOT", "DatasetNotFoundError", "evaldata_dir", "resolve_data_file"]

EVALDATA_ENV = "MEMORY_AGENT_EVALDATA"
REPO_ROOT = Path(__file__).resolve().parents[2]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset file is missing; the message says where we looked."""


def evaldata_dir() -> Path:
    """The shared evaldata folder (``$MEMORY_AGENT_EVALDATA`` or ``<repo>/../shared/evaldata``)."""
    env = os.environ.get(EVALDATA_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return (REPO_ROOT.parent / "shared" / "evaldata").resolve()


def resolve_data_file(path: str | os.PathLike[str] | None, default_relative: str, what: str) -> Path:
    """Return an existing file: ``path`` if given, else ``evaldata_dir() / default_relative``.

    Raises ``DatasetNotFoundError`` naming the exact path checked.
    """
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise DatasetNotFoundError(f"{what}: file not found at {p.resolve()}")
        return p
    p = evaldata_dir() / default_relative
    if not p.is_file():
        raise DatasetNotFoundError(
            f"{what}: file not found at {p} (default location; pass a path to the loader or set "
            f"${EVALDATA_ENV} to the folder holding '{default_relative}')"
        )
    return p
