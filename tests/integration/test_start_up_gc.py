"""Opening the memory moves what start-up built out of the cyclic GC's reach (memory/backend.py:
freeze_start_up), so a full collection in a turn no longer walks it (one took 95-141 ms in
bench_turn's turns). In a fresh interpreter: the test process's own GC state is its business."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import asyncio, gc, json, sys
from memory.backend import open_memory

async def main():
    before = gc.get_freeze_count()
    async with open_memory(sys.argv[1]):
        opened = gc.get_freeze_count()
    async with open_memory(sys.argv[1]):
        again = gc.get_freeze_count()
    print(json.dumps({"before": before, "opened": opened, "again": again}))

asyncio.run(main())
"""


@pytest.mark.slow
def test_opening_the_memory_freezes_what_start_up_built_once(new_database) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, new_database("gc")], cwd=ROOT, capture_output=True, text=True, timeout=180, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["before"] == 0
    assert counts["opened"] > 10_000  # the modules, classes and graph parts: tens of thousands of objects
    assert counts["again"] <= counts["opened"]  # once per process: a second open freezes nothing new (some frozen objects died since)


SERVING_PROBE = """
import asyncio, gc, json, os, sys
os.environ["DATABASE_URL"] = sys.argv[1]
os.environ["MEMORY_AGENT_MODEL"] = "offline"
os.environ["MEMORY_AGENT_POOL_SIZE"] = "2"
from memory.backend import open_memory
from app.http.app import create_app, lifespan

async def main():
    async with open_memory(sys.argv[1]):
        opened = gc.get_freeze_count()
    app = create_app()
    async with lifespan(app):
        serving = gc.get_freeze_count()
    print(json.dumps({"opened": opened, "serving": serving}))

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_server_worker_freezes_what_its_warm_up_and_graph_built_too(new_database) -> None:
    """A worker's warm-up (dateparser's regexes, the model's module) and its compiled graph are
    built after open_memory's freeze and live as long as it: frozen too, no full collection in a
    turn walks them."""
    out = subprocess.run([sys.executable, "-c", SERVING_PROBE, new_database("gc_serving")], cwd=ROOT, capture_output=True, text=True, timeout=180, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["serving"] > counts["opened"] + 1_000
