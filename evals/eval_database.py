"""Where evals write: a database of their own, never the agent's memory, emptied after each run.

Order of choice: ``--database-url``, else a database named ``memory_agent_eval`` on the agent's own server
(``DATABASE_URL`` or the embedded Postgres), created on first use. Every user,
chat record and thread an eval creates carries the run id and is deleted when
the run ends (also when it fails).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg
from psycopg import sql

from memory.backend import MemoryBackend, open_memory
from core.errors import DatabaseUnreachable
from storage.postgres import database_url, redact
from memory.chat_admin import forget_user_everywhere

log = logging.getLogger(__name__)

__all__ = ["EVAL_DATABASE_NAME", "EvalWorkspace", "eval_database_url", "open_eval_workspace"]

EVAL_DATABASE_NAME = "memory_agent_eval"


def _sibling_database(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    if info.get("dbname") == name:
        return url
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise DatabaseUnreachable(
            f"Could not create the eval database {name!r} on {redact(url)}: {str(exc).strip()}. "
            f"Pass --database-url with a Postgres database with pgvector the eval may write to."
        ) from exc
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def eval_database_url(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    return _sibling_database(database_url(), EVAL_DATABASE_NAME)


class EvalWorkspace:
    """The open backend plus what the run created, so it can be removed again."""

    def __init__(self, backend: MemoryBackend, run_id: str) -> None:
        self.backend = backend
        self.run_id = run_id
        self._users: set[str] = set()
        self._threads: set[str] = set()

    @property
    def store(self):
        return self.backend.store

    def user(self, *parts: str) -> str:
        """A user id for this run (no '.' or '/', as namespaces require)."""
        raw = "-".join(["eval", self.run_id, *parts])
        user = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw)
        self._users.add(user)
        return user

    def thread(self, *parts: str) -> str:
        thread = "-".join(["eval", self.run_id, *parts])
        self._threads.add(thread)
        return thread

    async def clean_up(self) -> None:
        for user in sorted(self._users):
            await forget_user_everywhere(self.backend, user)
        for thread in sorted(self._threads):
            await self.backend.checkpointer.adelete_thread(thread)


@asynccontextmanager
async def open_eval_workspace(run_id: str, url: str | None = None) -> AsyncIterator[EvalWorkspace]:
    target = eval_database_url(url)
    async with open_memory(target) as backend:
        # Load the embedding weights now, so the first fold's timing does not include it.
        await backend.embeddings.embeddings.aembed_query("warm up")
        workspace = EvalWorkspace(backend, run_id)
        try:
            yield workspace
        finally:
            try:
                await workspace.clean_up()
            except Exception as exc:  # cleaning must not hide the run's own error
                log.warning("could not remove the eval's users and threads from %s: %s", redact(target), exc)
