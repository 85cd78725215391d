"""Shared fixtures: a real Postgres with pgvector (never mocked), fresh databases per suite.

The embedded Postgres (pgserver) starts once per test session in a temporary
directory; set DATABASE_URL to run the suite against another server instead
(it must let us CREATE DATABASE).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import psycopg
import pytest

# Offline by construction: nothing may try to reach LangSmith or a model hub.
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGSMITH_TEST_TRACKING", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite decides the model per test; a developer's key must not leak into it.
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL"):
    os.environ.pop(_var, None)

from tests.support.embedded_postgres import throwaway_postgres, with_database  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


# Each test under one of these folders gets the folder's mark (``-m "not integration"``, ``-m llm``).
FOLDER_MARKS = {"/integration/": "integration", "/llm/": "llm"}


def pytest_addoption(parser):
    parser.addoption(
        "--update-screenshots", action="store_true", help="the web-page tests write the README's pictures into docs/images/"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        for folder, mark in FOLDER_MARKS.items():
            if folder in str(item.fspath):
                item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of a Postgres server (maintenance database) we may create databases on."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    with throwaway_postgres("ma-pg-") as server:
        yield server.get_uri()


@pytest.fixture(scope="session")
def new_database(server_url):
    """Factory: create an empty database and return its URL (dropped at the end of the session)."""
    created: list[str] = []

    def make(prefix: str = "t") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return with_database(server_url, name)

    yield make
    if not os.environ.get("DATABASE_URL"):
        return  # the throwaway server and its folder go as a whole (dropping each took seconds)
    with psycopg.connect(server_url, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def minilm():
    """The real default embeddings (all-MiniLM-L6-v2 in numpy), loaded once."""
    from embeddings import resolve_embeddings

    return resolve_embeddings("local:all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
async def backend(new_database, minilm) -> AsyncIterator:
    """A fully set-up backend (saver, store, knowledge base) on its own database, shared by a session."""
    from memory.backend import open_memory

    async with open_memory(new_database("shared"), minilm) as b:
        yield b


@pytest.fixture
def user_id() -> str:
    """A fresh user per test: tests sharing a database never see each other's memory."""
    return f"u{uuid.uuid4().hex[:12]}"
