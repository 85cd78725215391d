"""A served worker pays its one-off costs before its first request (app.http.app.warm_up).

Measured before: the first turn naming a date in a fresh worker took 337 ms against 95 ms for the
same turn later, ~0.5 s of dateparser building its regexes inside the event loop every turn of the
worker shares (and the first reply imported the model's module). Run in a fresh interpreter: in
this one another test may already have parsed a date.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.http_server import REPO_ROOT

pytestmark = pytest.mark.slow  # a Python subprocess

PROBE = """
import asyncio, json, sys
from types import SimpleNamespace
from datetime import datetime, timezone
from embeddings.resolution import HashEmbeddings
from app.http.app import warm_up
from dateparser import timezone_parser
from core.dates import resolve_date

asyncio.run(warm_up(SimpleNamespace(embeddings=SimpleNamespace(embeddings=HashEmbeddings(16)))))
built = timezone_parser._build_tz_regexes.cache_info()
resolve_date("on the 3rd of December", datetime(2026, 11, 25, tzinfo=timezone.utc))
after = timezone_parser._build_tz_regexes.cache_info()
print(json.dumps({"built": built.currsize, "misses_before": built.misses, "misses_after": after.misses,
                  "model_module": "offline_model.model" in sys.modules}))
"""


def test_a_workers_warm_up_leaves_date_parsing_and_the_model_ready_for_the_first_turn():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env={**os.environ, "MEMORY_AGENT_MODEL": "offline"}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["built"] == 1  # dateparser's time-zone regexes, built once per process
    assert seen["misses_after"] == seen["misses_before"]  # the first real parse builds nothing more
    assert seen["model_module"]
