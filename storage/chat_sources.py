"""Which chat holds the import of which conversation of another product (a ChatGPT or Claude
export's conversation id), so importing the same export again adds nothing.

One row per (owner, source id), pointing at the thread that holds it. The rule is the
primary key: :func:`claim` writes this row in the transaction that writes the thread's owner
row (:func:`create_imported_thread`), and of two imports of the same conversation exactly one
gets a new thread; the other is told which thread already holds it (:class:`AlreadyImported`)
and writes nothing. The row goes with the thread's owner row
(``ON DELETE CASCADE``): deleting the chat, or forgetting the user, lets it be imported anew.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from core.errors import MemoryAgentError
from core.namespaces import check_user_id
from storage import owner_forgets, thread_owners

TABLE = "memory_agent_chat_sources"

CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    owner text NOT NULL,
    source_id text NOT NULL,
    thread_id text NOT NULL REFERENCES {thread_owners.TABLE} (thread_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, source_id)
)"""


CLAIM = f"INSERT INTO {TABLE} (owner, source_id, thread_id) VALUES (%s, %s, %s) ON CONFLICT (owner, source_id) DO NOTHING RETURNING thread_id"
HOLDER = f"SELECT thread_id FROM {TABLE} WHERE owner = %s AND source_id = %s"


async def setup(pool: AsyncConnectionPool) -> None:
    """Idempotent; after thread_owners' set-up (its table is referenced)."""
    async with pool.connection() as conn:
        await conn.execute(CREATE)
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread_id)")


class AlreadyImported(MemoryAgentError):
    """The owner imported this source before: ``thread_id`` holds it (nothing was written)."""

    def __init__(self, source_id: str, thread_id: str) -> None:
        self.source_id, self.thread_id = source_id, thread_id
        super().__init__(f"{source_id} was imported before, as chat {thread_id}.")


async def claim(conn, owner: str, source_id: str, thread_id: str) -> None:
    """Record ``thread_id`` (its owner row written in this transaction) as the import of
    ``source_id``. AlreadyImported when another of the owner's threads holds it: raised inside the
    caller's transaction, it takes back the caller's writes too."""
    for _ in range(2):  # twice: the holding chat may be deleted between the insert and the read
        if await (await conn.execute(CLAIM, (owner, source_id, thread_id))).fetchone() is not None:
            return
        # ON CONFLICT waited for a concurrent claim to commit, so this reads the winner's row.
        holder = await (await conn.execute(HOLDER, (owner, source_id))).fetchone()
        if holder is not None:
            raise AlreadyImported(source_id, holder["thread_id"])
    raise RuntimeError(f"could not record the import of {source_id}")  # deleted and re-imported in between, twice


async def create_imported_thread(pool: AsyncConnectionPool, thread_id: str, owner: str, source_id: str) -> None:
    """thread_owners.create and :func:`claim` in one transaction: the new thread is the owner's and
    holds ``source_id``, or (AlreadyImported, ThreadExists) nothing is written."""
    check_user_id(owner)
    async with pool.connection() as conn, conn.transaction():
        await owner_forgets.check(conn, owner, owner_forgets.known_generation(owner))  # (as thread_owners.create)
        # thread_owners.create's statement, in this transaction with the source row.
        if await (await conn.execute(thread_owners.INSERT_IF_NO_HISTORY, {"thread_id": thread_id, "owner": owner})).fetchone() is None:
            raise thread_owners.ThreadExists(thread_id)
        await claim(conn, owner, source_id, thread_id)


async def thread_of(pool: AsyncConnectionPool, owner: str, source_id: str) -> str | None:
    """The owner's thread that holds ``source_id``, if any."""
    async with pool.connection() as conn:
        row = await (await conn.execute(HOLDER, (owner, source_id))).fetchone()
    return row["thread_id"] if row else None
