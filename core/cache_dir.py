"""Where memory-agent keeps what it downloads or builds (never in the repository):
``$MEMORY_AGENT_CACHE``, default ``~/.cache/memory-agent``. Shared by the local model's
runtime and weights (app/local) and an older embedded Postgres' binaries (storage/embedded_upgrade)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "MEMORY_AGENT_CACHE"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "memory-agent").expanduser()
