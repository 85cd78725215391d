"""How many times each user was forgotten (forget-me), and the guard every write of a request checks.

A request is authenticated, then writes; forget-me may run in between (a message past its chat's
ownership check whose run starts only after forget-me stopped the user's runs, an import whose body
was still arriving, a PATCH of memory). What it wrote then would outlive the user's forget, and no
one could delete it: the keys are gone.

- The key check reads the user's ``generation`` in the same statement
  (:func:`storage.api_keys.authenticate`), so the generation is the one the key was valid under; the
  HTTP app makes it the request's :data:`caller` (:func:`set_caller`).
- Forget-me's first step is one transaction (memory.chat_admin.forget_user_everywhere): the
  generation goes up (:func:`bump`, under the user's forget lock, taken exclusively) and the user's
  API keys go. It commits before forget-me stops runs or deletes anything: from then on no request
  authenticates as the user, and every request authenticated before sees a changed generation.
- Every entry point that creates a user's data checks (:func:`check`) in its own transaction, under
  the same lock taken shared: the start of a run (storage.chat_runs.start_run: HTTP, CLI), an owner
  row (storage.thread_owners), an import (storage.chat_imports), and every write of the user's
  memory (storage.user_transaction). A generation that changed raises :class:`OwnerForgotten` (HTTP
  410 ``user_forgotten``), nothing written. A write that got in before the bump committed is there
  when forget-me looks (the lock orders them), so forget-me stops or deletes it as before.

Callers known now (the CLI, a LangGraph server's run, forget-me itself) have no generation to
compare: nothing is checked for them. The table keeps the user id and the count, nothing else.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from psycopg_pool import AsyncConnectionPool

from core.errors import MemoryAgentError
from storage.postgres import advisory_key

TABLE = "memory_agent_owner_forgets"
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    owner text PRIMARY KEY,
    generation bigint NOT NULL,
    forgotten_at timestamptz NOT NULL DEFAULT now()
)"""
CURRENT = f"SELECT COALESCE((SELECT generation FROM {TABLE} WHERE owner = %s), 0) AS generation"

# (owner, generation) of the request being served, set once its key was checked (app.http.auth).
caller: ContextVar[tuple[str, int] | None] = ContextVar("memory_agent_caller_generation", default=None)


class OwnerForgotten(MemoryAgentError):
    """The user was forgotten (forget-me) after the request was authenticated: nothing is written."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        super().__init__("This user was forgotten (DELETE /me) after this request was authenticated; nothing of it was kept.")


def forget_lock_key(owner: str) -> int:
    return advisory_key(b"memory-agent:owner-forgets:", owner)


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        await conn.execute(CREATE)


async def generation(pool: AsyncConnectionPool, owner: str) -> int:
    """How many times ``owner`` was forgotten (0: never)."""
    async with pool.connection() as conn:
        return (await (await conn.execute(CURRENT, (owner,))).fetchone())["generation"]


def set_caller(owner: str, known: int) -> None:
    """The request being served is ``owner``'s, authenticated under generation ``known`` (its task and
    the runs it launches carry it)."""
    caller.set((owner, known))


@contextmanager
def no_caller() -> Iterator[None]:
    """Within the block nothing is checked: the code runs for a caller known now (forget-me's own writes)."""
    token = caller.set(None)
    try:
        yield
    finally:
        caller.reset(token)


def known_generation(owner: str, given: int | None = None) -> int | None:
    """``given``, else the generation the current request's caller was authenticated under when that
    caller is ``owner``; None: nothing to compare."""
    if given is not None:
        return given
    current = caller.get()
    return current[1] if current is not None and current[0] == owner else None


async def check(conn, owner: str, known: int | None) -> None:
    """In the caller's transaction: OwnerForgotten when ``owner`` was forgotten since generation
    ``known`` (None: nothing to check). Holds the user's forget lock shared until the transaction
    ends, so a forget-me that begins now waits for this write to commit, and then sees it."""
    if known is None:
        return
    await conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (forget_lock_key(owner),))
    if (await (await conn.execute(CURRENT, (owner,))).fetchone())["generation"] != known:
        raise OwnerForgotten(owner)


async def refuse_if_forgotten(conn, owner: str, known: int | None) -> None:
    """OwnerForgotten when ``owner`` was forgotten since generation ``known``, as the generation is
    now committed, without the forget lock (so no lock is held while the caller waits for another):
    a caller can be turned away before it queues; :func:`check` is what a write relies on."""
    if known is not None and (await (await conn.execute(CURRENT, (owner,))).fetchone())["generation"] != known:
        raise OwnerForgotten(owner)


async def bump(conn, owner: str) -> None:
    """In the caller's transaction: one more forget of ``owner``, under the user's forget lock taken
    exclusively (the writes checked meanwhile commit first)."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (forget_lock_key(owner),))
    await conn.execute(
        f"INSERT INTO {TABLE} (owner, generation) VALUES (%s, 1) "
        f"ON CONFLICT (owner) DO UPDATE SET generation = {TABLE}.generation + 1, forgotten_at = now()",
        (owner,),
    )
