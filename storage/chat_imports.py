"""Imports in progress, one row per import, shared by every process through Postgres.

An import (memory.chat_import) is one unit of work with its owner: the row is written in the
same transaction as the new chat's owner row, so no one can reach the chat before its import
is known. While the row exists:

- no run may start on the chat (:func:`refuse_runs_while_importing`, called by
  :func:`storage.chat_runs.start_run`): a message sent to a chat being imported is refused,
  so it can never be written into the middle of the import and lost;
- the importer beats the row (``heartbeat_at``) and reads its state between exchanges and every
  :data:`BEAT_SECONDS`; a row whose heartbeat stopped (the process was killed) reads as
  ``incomplete``, like one the importer marked so (the client left, a failure);
- at most :data:`MAX_RUNNING_PER_USER` imports of one owner run at once, counted under a lock of
  the owner's by :func:`begin` and :func:`take_over` alike (a resume runs as a new import does);
- forget-me and chat deletion win: :func:`cancel` flips the rows to ``cancelling``; the importer
  stops, removes what it wrote and deletes its row (:func:`wait_gone` waits for that); any later
  progress of a cancelled or deleted row is refused (:func:`record_progress` matches only
  ``running`` rows of its own worker), so an importer that missed the signal stops at its next
  exchange and removes its chat again.

The row goes when the import completes (:func:`finish`), or with the chat or its owner.
A resume (:func:`take_over`) continues an ``incomplete`` import of the same history (same digest)
from the checkpoint its last complete exchange ended on (``head_checkpoint``). A conversation that
grew since its import (a newer export) gets a row on its existing chat (:func:`begin_extension`),
whose exchanges go on from the chat's head; a run and an import never hold one thread together,
whichever starts first (both take :func:`lock_thread`).

An import that starts after its owner was forgotten is refused, however long its request took to
arrive (a body still coming in while forget-me ran): :func:`begin` and :func:`take_over` compare the
owner's forget generation with the one the caller was authenticated under
(:mod:`storage.owner_forgets`), under the owner's imports lock, which forget-me takes once its first
step (the generation bumped, the keys gone) committed and holds throughout (:func:`forgetting_owner`):
an import that began before has its row, which forget-me cancels like any other.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Iterable

from psycopg_pool import AsyncConnectionPool

from core.errors import MemoryAgentError
from core.namespaces import check_user_id
from storage import chat_sources, owner_forgets, thread_owners
from storage.owner_forgets import OwnerForgotten  # noqa: F401 (raised by begin and take_over)
from storage.postgres import advisory_key

TABLE = "memory_agent_imports"
TAKEN = "memory_agent_imports_taken"  # import ids and importer names only: nothing of the user
FORGETS = owner_forgets.TABLE  # one row per forgotten owner: how many times forget-me ran
BEAT_SECONDS = 0.5  # how often an importer beats its row and looks for a cancellation
STALE_AFTER_SECONDS = 10  # an importer silent this long is dead: its import reads as incomplete
MAX_RUNNING_PER_USER = 2  # imports of one user running at once (each holds a connection and a worker's time)

CREATE = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    import_id uuid PRIMARY KEY,
    thread_id text NOT NULL UNIQUE,
    owner text NOT NULL,
    state text NOT NULL,
    total integer NOT NULL,
    imported integer NOT NULL DEFAULT 0,
    exchanges_done integer NOT NULL DEFAULT 0,
    digest text NOT NULL,
    head_checkpoint text,
    head_writes text[] NOT NULL DEFAULT '{{}}',
    worker text,
    detail text,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_owner ON {TABLE} (owner)",
    # An import that adds a grown conversation's new messages to its existing chat (begin_extension).
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS extends_chat boolean NOT NULL DEFAULT false",
    # The importers whose rows another took over (take_over, take_back_extension): a stalled one that
    # comes back finds its row gone or another's, and must stop without undoing (beat says 'taken').
    # Kept until the chat is deleted (forget_takeovers): then a returning importer reads its row as
    # gone, a cancellation, and removes what it wrote since, as any importer of a deleted chat.
    f"""CREATE TABLE IF NOT EXISTS {TAKEN} (
    import_id uuid NOT NULL,
    worker text NOT NULL,
    thread_id text NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (import_id, worker)
)""",
    f"CREATE INDEX IF NOT EXISTS {TAKEN}_thread ON {TAKEN} (thread_id)",
    owner_forgets.CREATE,
)
# A row reads as: running (its importer beats it), incomplete (stopped, or its importer is dead),
# cancelling (forget-me or a deletion asked it to stop).
_STATE = f"""CASE WHEN state = 'running' AND heartbeat_at < now() - make_interval(secs => {STALE_AFTER_SECONDS})
             THEN 'incomplete' ELSE state END AS shown"""


class ImportInProgress(MemoryAgentError):
    """The chat is being imported (or its import is incomplete): nothing else may write to it."""

    def __init__(self, thread_id: str, state: str, imported: int, total: int, extends_chat: bool = False) -> None:
        self.thread_id, self.state = thread_id, state
        if state == "incomplete" and extends_chat:  # (its importer died: the next import takes the chat back)
            message = (
                f"Chat {thread_id} was taking the new messages of its conversation from an export when that import stopped "
                f"({imported} of {total} messages): import the export again, or delete the chat, first."
            )
        elif state == "incomplete":
            message = (
                f"Chat {thread_id} is an incomplete import ({imported} of {total} messages): resume it with the same history "
                f"(`memory-agent import FILE --resume {thread_id}` or POST /chats/import?resume={thread_id}; an export: import it "
                "again) or delete it first."
            )
        else:
            message = f"Chat {thread_id} is being imported ({imported} of {total} messages); wait until the import ends."
        super().__init__(message)


class TooManyImports(MemoryAgentError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} imports of this user are running already; wait for one to end.")


class ChatBusy(MemoryAgentError):
    """A reply is running on the chat that an import would extend, or the chat moved meanwhile."""


class NotResumable(MemoryAgentError):
    """A resume names a chat with no incomplete import of this user, or another history."""


@dataclass(frozen=True)
class ImportRow:
    import_id: str
    thread_id: str
    owner: str
    state: str  # as shown: running | incomplete | cancelling
    total: int
    imported: int
    exchanges_done: int
    digest: str
    head_checkpoint: str | None
    head_writes: tuple[str, ...]
    detail: str | None
    extends_chat: bool = False  # adds a grown conversation's new messages to a chat that was complete


def _row(r: dict) -> ImportRow:
    return ImportRow(
        import_id=str(r["import_id"]), thread_id=r["thread_id"], owner=r["owner"], state=r["shown"], total=r["total"],
        imported=r["imported"], exchanges_done=r["exchanges_done"], digest=r["digest"], head_checkpoint=r["head_checkpoint"],
        head_writes=tuple(r["head_writes"] or ()), detail=r["detail"], extends_chat=r["extends_chat"],
    )


def _lock_key(owner: str) -> int:
    return advisory_key(b"memory-agent:imports:", owner)


async def lock_thread(conn, thread_id: str) -> None:
    """Until the transaction ends: the thread's run-or-import lock. storage.chat_runs.start_run takes it
    before it looks for an import row, and :func:`begin_extension` before it looks for an active run, so
    each statement after it sees what the other committed (a snapshot taken before would not)."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(b"memory-agent:thread-writer:", thread_id),))


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        for statement in CREATE:
            await conn.execute(statement)


async def owner_generation(pool: AsyncConnectionPool, owner: str) -> int:
    """How many times ``owner`` was forgotten (:func:`storage.owner_forgets.generation`)."""
    return await owner_forgets.generation(pool, owner)


@asynccontextmanager
async def forgetting_owner(pool: AsyncConnectionPool, owner: str) -> AsyncIterator[None]:
    """Forget-me's span, after its first step (:mod:`storage.owner_forgets`) committed: the owner's
    imports lock is held (on a connection of its own) until the block ends, and the generation goes
    up once more then, failed or not (a caller authenticated while the forget ran, with no key to
    delete when auth is off, is refused after it). An import that begins meanwhile waits, then is
    refused; one that began before has its row, which forget-me cancels."""
    async with pool.connection() as conn:
        failure: BaseException | None = None
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(owner),))
            try:
                yield
            except BaseException as exc:  # the bump commits all the same
                failure = exc
            await owner_forgets.bump(conn, owner)
        if failure is not None:
            raise failure


async def _lock_owner(conn, owner: str, known_generation: int | None) -> None:
    """Take the owner's imports lock (until the transaction ends); OwnerForgotten when forget-me ran
    since the caller was authenticated (``known_generation``; None: the current request's, if any,
    else the caller is known now, e.g. the CLI)."""
    known = owner_forgets.known_generation(owner, known_generation)
    # Refused before waiting: forget-me holds this lock for its whole span (after bumping the
    # generation), and each import waiting for it held a pooled connection, until forget-me's own
    # steps found none (a review: a pool of 4, three imports, forget-me failed with PoolTimeout).
    await owner_forgets.refuse_if_forgotten(conn, owner, known)
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(owner),))
    await owner_forgets.check(conn, owner, known)


async def _refuse_past_limit(conn, owner: str) -> None:
    """TooManyImports when MAX_RUNNING_PER_USER imports of the owner are running. Under the owner's
    lock, for a new import and a resume alike, so two starting together cannot both pass."""
    running = await (
        await conn.execute(
            f"SELECT count(*) AS n FROM {TABLE} WHERE owner = %s AND state = 'running' "
            f"AND heartbeat_at >= now() - make_interval(secs => {STALE_AFTER_SECONDS})",
            (owner,),
        )
    ).fetchone()
    if running["n"] >= MAX_RUNNING_PER_USER:
        raise TooManyImports(MAX_RUNNING_PER_USER)


async def begin(
    pool: AsyncConnectionPool, thread_id: str, owner: str, *, total: int, digest: str, worker: str,
    source_id: str | None = None, known_generation: int | None = None,
) -> str:
    """The new chat's owner row and its import row (and its ``source_id``'s: storage.chat_sources), in one
    transaction; the import's id. chat_sources.AlreadyImported (nothing written) for a source imported before.

    OwnerForgotten when the owner was forgotten since ``known_generation`` (:func:`owner_generation`);
    TooManyImports when the owner has MAX_RUNNING_PER_USER imports running (both under a lock of the
    owner's: :func:`_lock_owner`); ThreadExists for a used id."""
    check_user_id(owner)
    import_id = str(uuid.uuid4())
    async with pool.connection() as conn, conn.transaction():
        await _lock_owner(conn, owner, known_generation)
        await _refuse_past_limit(conn, owner)
        row = await (await conn.execute(thread_owners.INSERT_IF_NO_HISTORY, {"thread_id": thread_id, "owner": owner})).fetchone()
        if row is None:
            raise thread_owners.ThreadExists(thread_id)
        await conn.execute(
            f"INSERT INTO {TABLE} (import_id, thread_id, owner, state, total, digest, worker) VALUES (%s, %s, %s, 'running', %s, %s, %s)",
            (import_id, thread_id, owner, total, digest, worker),
        )
        if source_id is not None:
            await chat_sources.claim(conn, owner, source_id, thread_id)
    return import_id


async def begin_extension(
    pool: AsyncConnectionPool, thread_id: str, owner: str, *, total: int, imported: int, exchanges_done: int,
    head_checkpoint: str, head_writes: Iterable[str], digest: str, worker: str, known_generation: int | None = None,
) -> str:
    """An import row on the owner's existing chat ``thread_id``, whose first ``imported`` messages
    (``exchanges_done`` exchanges) the chat holds up to ``head_checkpoint``: a grown conversation's
    new exchanges go on from there. The import's id.

    ChatBusy (nothing written) when a reply is running on the chat or its head is no longer
    ``head_checkpoint`` (a turn ended in between); NotResumable when the chat has an import row already
    or is not the owner's; OwnerForgotten and TooManyImports as for :func:`begin`.

    The chat was complete before: an extension that stops is taken back to its last whole exchange
    and its row deleted (the chat takes messages again, and the next import extends it from there),
    and one whose importer died is taken back the same way by the next import (:func:`take_back_extension`),
    not resumed (:func:`take_over` refuses it)."""
    import_id = str(uuid.uuid4())
    async with pool.connection() as conn, conn.transaction():
        await _lock_owner(conn, owner, known_generation)
        await lock_thread(conn, thread_id)
        holder = await (await conn.execute(f"SELECT owner FROM {thread_owners.TABLE} WHERE thread_id = %s", (thread_id,))).fetchone()
        if holder is None or holder["owner"] != owner:
            raise NotResumable(f"Chat {thread_id} is not yours to import into.")
        if await (await conn.execute(f"SELECT 1 FROM {TABLE} WHERE thread_id = %s", (thread_id,))).fetchone() is not None:
            raise NotResumable(f"Chat {thread_id} is being imported already.")
        # (The runs table is storage.chat_runs', which imports this module: named here, not imported.)
        busy = await (
            await conn.execute(
                "SELECT 1 FROM memory_agent_runs WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing')", (thread_id,)
            )
        ).fetchone()
        head = await (
            await conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
                (thread_id,),
            )
        ).fetchone()
        if busy is not None or head is None or head["checkpoint_id"] != head_checkpoint:
            raise ChatBusy(f"A reply is running on chat {thread_id}, or has just ended; import again when it has.")
        await _refuse_past_limit(conn, owner)
        await conn.execute(
            f"INSERT INTO {TABLE} (import_id, thread_id, owner, state, total, imported, exchanges_done, digest, head_checkpoint, head_writes, worker, "
            "extends_chat) VALUES (%s, %s, %s, 'running', %s, %s, %s, %s, %s, %s, %s, true)",
            (import_id, thread_id, owner, total, imported, exchanges_done, digest, head_checkpoint, list(head_writes), worker),
        )
    return import_id


async def take_over(
    pool: AsyncConnectionPool, thread_id: str, owner: str, *, digest: str, worker: str, known_generation: int | None = None
) -> ImportRow:
    """Resume: the incomplete import of ``thread_id`` (a stopped one, or one whose importer died)
    becomes this worker's running one. NotResumable otherwise, or when ``digest`` names another history;
    OwnerForgotten and TooManyImports as for :func:`begin` (a resume runs as a new import does)."""
    async with pool.connection() as conn, conn.transaction():
        await _lock_owner(conn, owner, known_generation)
        found = await (await conn.execute(f"SELECT *, {_STATE} FROM {TABLE} WHERE thread_id = %s AND owner = %s FOR UPDATE", (thread_id, owner))).fetchone()
        if found is None:
            raise NotResumable(f"Chat {thread_id} has no incomplete import of yours to resume.")
        row = _row(found)
        if row.state != "incomplete":
            raise NotResumable(f"The import of chat {thread_id} is {row.state}; only an incomplete import can be resumed.")
        if row.extends_chat:  # (its chat was complete before it: the next import takes it back, take_back_extension)
            raise NotResumable(f"Chat {thread_id} was taking a grown conversation's new messages when that import stopped: import the export again.")
        if row.digest != digest:
            raise NotResumable(f"This is not the history chat {thread_id} was imported from (its messages differ); resume with the same file.")
        await _refuse_past_limit(conn, owner)  # (the row itself is incomplete: not counted)
        await _record_takeover(conn, row.import_id, found["worker"], thread_id)
        await conn.execute(
            f"UPDATE {TABLE} SET state = 'running', worker = %s, detail = NULL, heartbeat_at = now() WHERE import_id = %s",
            (worker, row.import_id),
        )
    return row


async def _record_takeover(conn, import_id: str, worker: str | None, thread_id: str) -> None:
    if worker:
        await conn.execute(
            f"INSERT INTO {TAKEN} (import_id, worker, thread_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (import_id, worker, thread_id)
        )


async def forget_takeovers(pool: AsyncConnectionPool, thread_ids: Iterable[str]) -> None:
    """The chats are deleted: an importer taken over on one of them that comes back is cancelled
    (and removes what it wrote), not 'taken'."""
    async with pool.connection() as conn:
        await conn.execute(f"DELETE FROM {TAKEN} WHERE thread_id = ANY(%s)", (list(thread_ids),))


async def drop(pool: AsyncConnectionPool, import_id: str) -> None:
    """The row of ``import_id``, whoever has it (an importer cancelled while it took a row back)."""
    async with pool.connection() as conn:
        await conn.execute(f"DELETE FROM {TABLE} WHERE import_id = %s", (import_id,))


async def take_back_extension(
    pool: AsyncConnectionPool, thread_id: str, owner: str, *, worker: str, known_generation: int | None = None
) -> ImportRow | None:
    """An extension of ``thread_id`` (:func:`begin_extension`) whose importer died: it becomes this
    worker's, to take the chat back to the row's last whole exchange and delete the row, whatever
    export comes next. None when the chat has no such row (a running extension is left alone)."""
    async with pool.connection() as conn, conn.transaction():
        await _lock_owner(conn, owner, known_generation)
        found = await (await conn.execute(f"SELECT *, {_STATE} FROM {TABLE} WHERE thread_id = %s AND owner = %s FOR UPDATE", (thread_id, owner))).fetchone()
        if found is None or not found["extends_chat"] or found["shown"] != "incomplete":
            return None
        await _record_takeover(conn, found["import_id"], found["worker"], thread_id)
        await conn.execute(f"UPDATE {TABLE} SET state = 'running', worker = %s, heartbeat_at = now() WHERE import_id = %s", (worker, found["import_id"]))
    return _row(found)


async def beat(pool: AsyncConnectionPool, import_id: str, worker: str) -> str | None:
    """Refresh the importer's heartbeat; the row's state. None: the row is gone (a deletion or
    forget-me removed it); ``taken``: another worker has it, or had it (this one was silent past
    STALE_AFTER_SECONDS and another import took it over: it must stop, and remove nothing)."""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                f"UPDATE {TABLE} SET heartbeat_at = now() WHERE import_id = %s AND worker = %s RETURNING state", (import_id, worker)
            )
        ).fetchone()
        if row is None and await (
            await conn.execute(
                f"SELECT 1 FROM {TABLE} WHERE import_id = %s UNION ALL SELECT 1 FROM {TAKEN} WHERE import_id = %s AND worker = %s",
                (import_id, import_id, worker),
            )
        ).fetchone() is not None:
            return "taken"
    return row["state"] if row else None


async def record_progress(
    pool: AsyncConnectionPool, import_id: str, worker: str, *, imported: int, exchanges: int, head: str | None, head_writes: Iterable[str]
) -> bool:
    """After a complete exchange: how far the import got and where the thread stands. False when
    the import was cancelled, deleted or taken by another worker: the importer must stop."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"UPDATE {TABLE} SET imported = %s, exchanges_done = %s, head_checkpoint = %s, head_writes = %s, heartbeat_at = now() "
            "WHERE import_id = %s AND worker = %s AND state = 'running'",
            (imported, exchanges, head, list(head_writes), import_id, worker),
        )
        return cur.rowcount == 1


async def finish(pool: AsyncConnectionPool, import_id: str, worker: str) -> bool:
    """The import completed: its row goes. False when it had been cancelled meanwhile (the importer undoes it)."""
    async with pool.connection() as conn:
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE import_id = %s AND worker = %s AND state = 'running'", (import_id, worker))
        return cur.rowcount == 1


async def mark_incomplete(pool: AsyncConnectionPool, import_id: str, worker: str, detail: str) -> bool:
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"UPDATE {TABLE} SET state = 'incomplete', detail = %s WHERE import_id = %s AND worker = %s AND state = 'running'",
            (detail, import_id, worker),
        )
        return cur.rowcount == 1


async def cancel(pool: AsyncConnectionPool, owner: str, thread_id: str | None = None) -> list[ImportRow]:
    """Ask the owner's imports (or the one of ``thread_id``) to stop and undo themselves; the rows
    as they were (a ``running`` one has an importer that will answer, see :func:`wait_gone`)."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"""WITH old AS (SELECT import_id, {_STATE} FROM {TABLE} WHERE owner = %s AND (%s::text IS NULL OR thread_id = %s) FOR UPDATE)
                UPDATE {TABLE} i SET state = 'cancelling' FROM old WHERE i.import_id = old.import_id
                RETURNING i.*, old.shown""",
                (owner, thread_id, thread_id),
            )
        ).fetchall()
    return [_row(r) for r in rows]


async def wait_gone(pool: AsyncConnectionPool, import_ids: list[str], timeout: float) -> bool:
    """Wait until the importers of ``import_ids`` have stopped and removed their rows (or died:
    their heartbeat expired). False on timeout; a late importer still stops at its next step."""
    deadline = time.monotonic() + timeout
    while import_ids:
        async with pool.connection() as conn:
            rows = await (
                await conn.execute(
                    f"SELECT import_id FROM {TABLE} WHERE import_id = ANY(%s::uuid[]) "
                    f"AND heartbeat_at >= now() - make_interval(secs => {STALE_AFTER_SECONDS})",
                    (import_ids,),
                )
            ).fetchall()
        import_ids = [str(r["import_id"]) for r in rows]
        if not import_ids:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def delete(pool: AsyncConnectionPool, owner: str, thread_id: str | None = None) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE owner = %s AND (%s::text IS NULL OR thread_id = %s)", (owner, thread_id, thread_id))
        return cur.rowcount


async def of_threads(pool: AsyncConnectionPool, owner: str | None, thread_ids: Iterable[str]) -> dict[str, ImportRow]:
    """The imports among ``thread_ids`` (of ``owner``, unless None), by thread (what chat lists show)."""
    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return {}
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"SELECT *, {_STATE} FROM {TABLE} WHERE (%s::text IS NULL OR owner = %s) AND thread_id = ANY(%s)", (owner, owner, ids)
            )
        ).fetchall()
    return {r["thread_id"]: _row(r) for r in rows}


async def refuse_runs_while_importing(conn, thread_id: str) -> None:
    """ImportInProgress when ``thread_id`` has an import (running, incomplete or being cancelled)."""
    row = await (await conn.execute(f"SELECT *, {_STATE} FROM {TABLE} WHERE thread_id = %s", (thread_id,))).fetchone()
    if row is not None:
        found = _row(row)
        raise ImportInProgress(thread_id, found.state, found.imported, found.total, found.extends_chat)
