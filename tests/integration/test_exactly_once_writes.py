"""Memory writes are exactly-once whatever entry point runs them: the rule lives in the storage layer.

Two writers of one user race: two chats of one user extracting at the same moment, through the
graph alone (as LangGraph Server and Studio run it: no HTTP layer, no lock of the caller) and
through two CLI processes. Every trial must end with each fact stored once and no field lost.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest
from langchain_core.messages import HumanMessage

from core.context import Context
from graph.assembly import compile_graph
from memory.backend import open_memory
from memory.user_memory import get_user_document, list_facts
from tests.conftest import REPO_ROOT
from tests.support.graph_turns import new_thread
from tests.support.scripted_model import registered_scripted_model

TRIALS = 20
# One fact per CLI round, unlike each other (near duplicates would merge, by design, and blur the count).
HOBBIES = [
    "chess", "surfing", "pottery", "baking sourdough", "bird watching", "rock climbing", "knitting", "jazz piano",
    "scuba diving", "gardening", "origami", "marathon running", "astronomy", "woodworking", "salsa dancing",
    "beekeeping", "fly fishing", "calligraphy", "sailing", "stand-up comedy",
]


def racing_extractions(kind, messages):
    """Side A and side B state the same fact and a different profile field each."""
    if kind != "extract":
        return {"title": "Race"} if kind == "title" else "ok"
    side_b = "side B" in str(messages[-1].content)
    return {
        "new_facts": [{"text": "Has a dog named Rex", "importance": "medium"}],
        "new_preferences": {},
        "profile_updates": {"location": "Haifa"} if side_b else {"name": "Dana"},
        "task_updates": [],
    }


@pytest.fixture
def racing_model():
    with registered_scripted_model(racing_extractions) as (name, _):
        yield name


@pytest.mark.slow
async def test_concurrent_extractions_through_the_graph_store_each_fact_once_and_lose_no_field(backend, racing_model):
    graph = compile_graph(backend.checkpointer, backend.store)
    duplicated = lost = 0
    for _ in range(TRIALS):
        user = f"race-{uuid.uuid4().hex[:8]}"
        ctx = Context(user_id=user, model=racing_model)
        await asyncio.gather(
            graph.ainvoke({"messages": [HumanMessage("side A: I'm Dana and I have a dog named Rex")]}, new_thread(), context=ctx),
            graph.ainvoke({"messages": [HumanMessage("side B: I live in Haifa and I have a dog named Rex")]}, new_thread(), context=ctx),
        )
        rex = [f for f in await list_facts(backend.store, user) if f.text == "Has a dog named Rex"]
        duplicated += len(rex) != 1
        profile = (await get_user_document(backend.store, user)).profile
        lost += (profile.name, profile.location) != ("Dana", "Haifa")
    assert (duplicated, lost) == (0, 0), f"{duplicated} duplicated and {lost} lost of {TRIALS} trials"


def _cli(user: str, url: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(DATABASE_URL=url, MEMORY_AGENT_MODEL="offline")
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "chat", "--user", user, "--new"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO_ROOT, env=env,
    )


@pytest.mark.slow  # CLI processes
async def test_two_cli_processes_of_one_user_store_each_fact_once_and_lose_no_note(new_database, minilm):
    url = new_database("clirace")
    async with open_memory(url, minilm):  # the schema, as a first start would make it
        pass
    user = f"race-{uuid.uuid4().hex[:8]}"
    first, second = _cli(user, url), _cli(user, url)
    try:
        # Lockstep: both processes get message i, and both answer it, before message i+1 goes out,
        # so every round is one race of two extractions of the same user.
        for i in range(TRIALS):
            for proc, drink in ((first, "tea"), (second, "coffee")):
                proc.stdin.write(f"I love {HOBBIES[i]}. I prefer {drink} variety {i}\n".encode())
                proc.stdin.flush()
            for proc in (first, second):
                assert proc.stdout.readline(), "the CLI stopped answering"
        for proc in (first, second):
            proc.stdin.close()
            assert proc.wait(timeout=120) == 0
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()

    async with open_memory(url, minilm) as backend:
        facts = [f.text for f in await list_facts(backend.store, user)]
        notes = (await get_user_document(backend.store, user)).preferences.other_notes
    duplicated = [h for h in HOBBIES if facts.count(f"Loves {h}") != 1]
    lost = [n for i in range(TRIALS) for n in (f"Prefers tea variety {i}", f"Prefers coffee variety {i}") if n not in notes]
    assert (duplicated, lost) == ([], []), f"{len(duplicated)} rounds duplicated, {len(lost)} notes lost of {TRIALS} rounds"
