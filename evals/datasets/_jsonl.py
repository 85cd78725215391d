"""Small helpers: read a JSON or a JSON-lines file, with errors that name the file and say what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """The file's JSON value; ``ValueError`` naming the file when it is empty, not UTF-8 text, or not JSON."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a JSON file (not UTF-8 text: byte {exc.start})") from exc
    if not text.strip():
        raise ValueError(f"{path}: the file is empty; expected JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})") from exc


def iter_jsonl(path: Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-empty line (at most ``limit``); errors name file and line."""
    count = 0
    with open(path, encoding="utf-8") as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if limit is not None and count >= limit:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
                yield record
                count += 1
        except UnicodeDecodeError as exc:  # text is decoded a block at a time: no line number to give
            raise ValueError(f"{path}: not a JSON-lines file (not UTF-8 text)") from exc
