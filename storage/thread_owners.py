"""Who owns each thread (chat): one row per thread, written only by our server code.

Ownership used to be read from a record in the caller's own ``("users", U, "chats")``
store namespace, which any client of the LangGraph store API can write. This table
is the one source of truth instead: the chat API, forget-me, the read queries (MCP and
the agent's tools) and the LangGraph auth handlers all ask it.

The rule lives here, in SQL, so no caller can get it wrong:

- :func:`create` takes a brand-new id: refused when the id has an owner row or any
  checkpoint (a thread someone else already wrote to);
- :func:`claim_ownership` (a run on a thread) inserts the row when there is none
  (``INSERT … ON CONFLICT DO NOTHING``) and then compares: a thread owned by another user
  is refused. Two concurrent first claims have exactly one winner (the primary key).
  With ``adopt_history=False`` a thread that has checkpoints but no owner is refused too.

A request authenticated before its user was forgotten writes no owner row (OwnerForgotten:
:mod:`storage.owner_forgets`, checked in the insert's transaction).

Rows go when the chat is deleted (:func:`release`) or its owner is forgotten
(:func:`release_all`). Both also announce it (``NOTIFY`` on :data:`RELEASED_CHANNEL`,
sent when the deletion commits), so a running LangGraph server drops its own records of
those threads (:func:`released`; app/studio/server_app.py listens).
"""

from __future__ import annotations

import logging
from typing import AsyncIterator, Iterable

import psycopg
from psycopg_pool import AsyncConnectionPool

from core.errors import MemoryAgentError
from core.namespaces import ROOT, check_thread_id, check_user_id, thread_id_problem
from storage import owner_forgets

log = logging.getLogger(__name__)

TABLE = "memory_agent_thread_owners"
RELEASED_CHANNEL = "memory_agent_threads_released"

CREATE = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    thread_id text PRIMARY KEY,
    owner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_owner ON {TABLE} (owner)",
)

# Once, when the table is first created on a database that already has chats: the owner is
# whoever the server-written run rows and the chat records agree on. A thread two users lay
# claim to (possibly a forged record) stays without owner, so nobody reaches it through the API.
BACKFILL = f"""
WITH claims AS (
    SELECT key AS thread_id, split_part(prefix, '.', 2) AS owner FROM store
    WHERE split_part(prefix, '.', 1) = %(root)s AND split_part(prefix, '.', 3) = 'chats'
      AND split_part(prefix, '.', 4) = ''
    UNION
    SELECT thread_id, user_id FROM memory_agent_runs
), agreed AS (
    SELECT thread_id, min(owner) AS owner, count(DISTINCT owner) AS owners FROM claims GROUP BY thread_id
), inserted AS (
    INSERT INTO {TABLE} (thread_id, owner)
    SELECT thread_id, owner FROM agreed WHERE owners = 1
    ON CONFLICT (thread_id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted) AS owned, (SELECT count(*) FROM agreed WHERE owners > 1) AS disputed
"""

# A new owner row, unless the thread already has checkpoints (history written before any owner).
INSERT_IF_NO_HISTORY = f"""
INSERT INTO {TABLE} (thread_id, owner)
SELECT %(thread_id)s, %(owner)s
WHERE NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s)
ON CONFLICT (thread_id) DO NOTHING
RETURNING owner
"""
INSERT = f"INSERT INTO {TABLE} (thread_id, owner) VALUES (%(thread_id)s, %(owner)s) ON CONFLICT (thread_id) DO NOTHING RETURNING owner"
CURRENT_OWNER = f"SELECT owner FROM {TABLE} WHERE thread_id = %(thread_id)s"
# The same, holding the owner row so it is neither handed over nor deleted until the transaction ends.
CURRENT_OWNER_HELD = f"{CURRENT_OWNER} FOR SHARE"
# The owners of many threads at once, held likewise (a bulk write's check).
OWNERS_HELD = f"SELECT thread_id, owner FROM {TABLE} WHERE thread_id = ANY(%(thread_ids)s) FOR SHARE"


class ThreadExists(MemoryAgentError):
    """A new thread was asked for under an id that is already in use."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(f"Thread {thread_id} already exists: create the thread without an id, or with a new one.")


class ThreadTaken(MemoryAgentError, PermissionError):
    """The thread is another user's, or has history that no one owns."""

    def __init__(self, thread_id: str, owner: str | None) -> None:
        self.thread_id, self.owner = thread_id, owner
        if owner is None:
            message = f"Thread {thread_id} has history but no recorded owner; it cannot be taken over."
        else:
            message = f"Thread {thread_id} belongs to another user."
        super().__init__(message)


async def setup(pool: AsyncConnectionPool) -> None:
    """Idempotent; run by the backend's set-up under its schema lock, after the saver's, the
    store's and the run records' (the one-time backfill reads them)."""
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT to_regclass(%s) IS NULL AS missing", (TABLE,))).fetchone()
        for statement in CREATE:
            await conn.execute(statement)
        if row["missing"]:
            counts = await (await conn.execute(BACKFILL, {"root": ROOT})).fetchone()
            if counts["owned"] or counts["disputed"]:
                log.warning(
                    "thread owners recorded for %d existing chats; %d chats claimed by several users were left "
                    "without owner (no one reaches them through the API)",
                    counts["owned"],
                    counts["disputed"],
                )


async def owner_of(pool: AsyncConnectionPool, thread_id: str) -> str | None:
    async with pool.connection() as conn:
        row = await (await conn.execute(CURRENT_OWNER, {"thread_id": thread_id})).fetchone()
    return row["owner"] if row else None


async def create(pool: AsyncConnectionPool, thread_id: str, owner: str) -> None:
    """Record ``owner`` for a new thread; ThreadExists when the id is already owned or has history."""
    check_user_id(owner)  # no owner row for a user whose memory could not be stored
    check_thread_id(thread_id)  # nor for a chat that could not be listed
    async with pool.connection() as conn, conn.transaction():
        await owner_forgets.check(conn, owner, owner_forgets.known_generation(owner))
        row = await (await conn.execute(INSERT_IF_NO_HISTORY, {"thread_id": thread_id, "owner": owner})).fetchone()
    if row is None:
        raise ThreadExists(thread_id)


async def _check_new_thread_id(pool: AsyncConnectionPool, thread_id: str) -> None:
    """InvalidThreadId for an id no new chat may take; a chat that has its owner row already (made
    before the rule) keeps its id and its owner's claims still pass. Costs a query only for such an id."""
    if thread_id_problem(thread_id) is not None and (isinstance(thread_id, str) and "\x00" in thread_id or await owner_of(pool, thread_id) is None):
        check_thread_id(thread_id)


async def claim_ownership(pool: AsyncConnectionPool, thread_id: str, owner: str, *, adopt_history: bool = True) -> str:
    """Make sure ``owner`` owns the thread, recording it when no one does yet; returns the owner.

    ThreadTaken when another user owns it, or (``adopt_history=False``, for callers that cannot
    tell a new thread from someone else's old one) when it has checkpoints but no owner.
    """
    check_user_id(owner)  # no owner row for a user whose memory could not be stored
    await _check_new_thread_id(pool, thread_id)  # nor for a chat that could not be listed
    return await _claim(pool, thread_id, owner, (INSERT if adopt_history else INSERT_IF_NO_HISTORY,), {"thread_id": thread_id, "owner": owner})


async def _claim(pool: AsyncConnectionPool, thread_id: str, owner: str, attempts: tuple[str, ...], params: dict) -> str:
    """Run ``attempts`` in order until one returns a row, else read the current owner; ThreadTaken
    unless the thread ends up ``owner``'s; OwnerForgotten when the request's caller (``owner``) was
    forgotten since it was authenticated."""
    row = None
    known = owner_forgets.known_generation(owner)
    async with pool.connection() as conn:  # autocommit: each statement sees a concurrent claim's committed row
        for sql in (*attempts, CURRENT_OWNER):
            if sql is CURRENT_OWNER or known is None:
                row = await (await conn.execute(sql, params)).fetchone()
            else:  # a new owner row only while the caller's user is not forgotten (its own transaction)
                async with conn.transaction():
                    await owner_forgets.check(conn, owner, known)
                    row = await (await conn.execute(sql, params)).fetchone()
            if row is not None:
                break
    current = row["owner"] if row else None
    if current != owner:
        raise ThreadTaken(thread_id, current)
    return owner


# A thread its giver owns and nobody has written to yet passes to the taker (one statement: no race).
HAND_OVER = f"""
UPDATE {TABLE} SET owner = %(taker)s
WHERE thread_id = %(thread_id)s AND owner = %(giver)s
  AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s)
RETURNING owner
"""


async def claim_handed_over(pool: AsyncConnectionPool, thread_id: str, taker: str, giver: str) -> str:
    """:func:`claim_ownership` by ``taker`` (``adopt_history=False``), where a thread ``giver`` owns
    with no history yet also passes to ``taker``: Studio creates the thread as its own user, and the
    run on it names the user it acts as (``configurable.user_id``). ThreadTaken otherwise."""
    check_user_id(taker)
    await _check_new_thread_id(pool, thread_id)
    params = {"thread_id": thread_id, "owner": taker, "taker": taker, "giver": giver}
    return await _claim(pool, thread_id, taker, (INSERT_IF_NO_HISTORY, HAND_OVER), params)


async def owners_of(pool: AsyncConnectionPool, thread_ids: Iterable[str]) -> dict[str, str]:
    """The owner of each of ``thread_ids`` that has one."""
    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return {}
    async with pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT thread_id, owner FROM {TABLE} WHERE thread_id = ANY(%s)", (ids,))).fetchall()
    return {r["thread_id"]: r["owner"] for r in rows}


class ChatGone(MemoryAgentError, LookupError):
    """A chat's record was to be written where the chat is no longer its user's (deleted meanwhile)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(f"Chat {thread_id} no longer exists (it was deleted).")


async def hold_owned(conn, thread_id: str, owner: str) -> None:
    """Within ``conn``'s transaction: the thread is ``owner``'s, and its owner row is held until the
    transaction ends (ChatGone when it has none, ThreadTaken when another user's). A chat's record is
    written only so: a write racing the chat's deletion (a rename, a turn's record) brought the
    record, title and summary, back after the chat was gone."""
    row = await (await conn.execute(CURRENT_OWNER_HELD, {"thread_id": thread_id})).fetchone()
    current = row["owner"] if row else None
    if current is None:
        raise ChatGone(thread_id)
    if current != owner:
        raise ThreadTaken(thread_id, current)


async def check_not_anothers(pool: AsyncConnectionPool, thread_id: str, user: str) -> None:
    """ThreadTaken when another user owns the thread: reads and deletions are held to the rule
    :func:`claim_ownership` applies to a run (a thread no one owns is readable where a run would adopt
    it, and deletable: an import undoing itself after forget-me released its owner row)."""
    current = await owner_of(pool, thread_id)
    if current is not None and current != user:
        raise ThreadTaken(thread_id, current)


async def threads_of(pool: AsyncConnectionPool, owner: str) -> list[str]:
    async with pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT thread_id FROM {TABLE} WHERE owner = %s ORDER BY created_at", (owner,))).fetchall()
    return [r["thread_id"] for r in rows]


async def all_owned(pool: AsyncConnectionPool) -> list[tuple[str, str]]:
    """(thread id, owner) of every owned thread (a rebuild of derived data walks them all)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT thread_id, owner FROM {TABLE} ORDER BY owner, created_at")).fetchall()
    return [(r["thread_id"], r["owner"]) for r in rows]


async def owned_among(pool: AsyncConnectionPool, owner: str, thread_ids: Iterable[str]) -> set[str]:
    """The subset of ``thread_ids`` that ``owner`` owns."""
    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return set()
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(f"SELECT thread_id FROM {TABLE} WHERE owner = %s AND thread_id = ANY(%s)", (owner, ids))
        ).fetchall()
    return {r["thread_id"] for r in rows}


async def gone_among(pool: AsyncConnectionPool, thread_ids: Iterable[str]) -> set[str]:
    """The subset of ``thread_ids`` that no longer exist: no owner row and no checkpoint (a deleted
    chat, a stateless run's thread). Their messages are gone with them."""
    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return set()
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"SELECT t AS thread_id FROM unnest(%s::text[]) AS t WHERE NOT EXISTS (SELECT 1 FROM {TABLE} o WHERE o.thread_id = t) "
                "AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = t)",
                (ids,),
            )
        ).fetchall()
    return {r["thread_id"] for r in rows}


async def release(pool: AsyncConnectionPool, thread_id: str) -> None:
    """Forget who owned a deleted thread."""
    async with pool.connection() as conn, conn.transaction():
        await release_on(conn, thread_id)


async def release_on(conn, thread_id: str) -> None:
    """:func:`release` within ``conn``'s transaction (the listeners hear of it when it commits)."""
    await conn.execute(f"DELETE FROM {TABLE} WHERE thread_id = %s", (thread_id,))
    await conn.execute("SELECT pg_notify(%s, %s)", (RELEASED_CHANNEL, f"thread:{thread_id}"))


async def release_all(pool: AsyncConnectionPool, owner: str) -> int:
    """Forget every thread of a forgotten owner."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE owner = %s", (owner,))
        await conn.execute("SELECT pg_notify(%s, %s)", (RELEASED_CHANNEL, f"owner:{owner}"))
        return cur.rowcount


async def released(url: str) -> AsyncIterator[tuple[str, str]]:
    """``("owner", user_id)`` or ``("thread", thread_id)`` each time :func:`release_all` or
    :func:`release` commits anywhere on this database, until the connection drops (it raises then)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
        await conn.execute(f"LISTEN {RELEASED_CHANNEL}")
        async for note in conn.notifies():
            kind, _, value = note.payload.partition(":")
            if kind in ("owner", "thread") and value:
                yield kind, value
