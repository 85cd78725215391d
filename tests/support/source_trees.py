"""The project's source files parsed once per test process: the architecture tests each walk
all of them, and parsing ~200 files took ~1.5 s per test."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """The file's syntax tree; shared between tests, so read it, never change it."""
    return ast.parse(path.read_text(encoding="utf-8"))
