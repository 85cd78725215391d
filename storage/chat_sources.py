"""Which chat holds the import of which conversation of another product (a ChatGPT or Claude
export's conversation id), so importing the same export again adds nothing.

One row per (owner, source id), pointing at the thread that holds it. The rule is the
primary key: :func:`create_imported_thread` writes the thread's owner row and this row in one
transaction, and of two imports of the same conversation exactly one gets a new thread; the
other is told which thread already holds it. The row goes with the thread's owner row
(``ON DELETE CASCADE``): deleting the chat, or forgetting the user, lets it be imported anew.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from core.namespaces import check_user_id
from storage import thread_owners

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


async def create_imported_thread(pool: AsyncConnectionPool, thread_id: str, owner: str, source_id: str) -> str | None:
    """Record ``owner`` for the new thread ``thread_id`` as the import of ``source_id``; None when
    done, else the id of the owner's thread that already holds that source (nothing is written).
    thread_owners.ThreadExists when ``thread_id`` is already in use."""
    check_user_id(owner)
    async with pool.connection() as conn, conn.transaction():
        # The same statement as thread_owners.create, in this transaction with the source row.
        row = await (await conn.execute(thread_owners.INSERT_IF_NO_HISTORY, {"thread_id": thread_id, "owner": owner})).fetchone()
        if row is None:
            raise thread_owners.ThreadExists(thread_id)
        for _ in range(2):  # twice: the holding chat may be deleted between the insert and the read
            claimed = await (await conn.execute(CLAIM, (owner, source_id, thread_id))).fetchone()
            if claimed is not None:
                return None
            # ON CONFLICT waited for a concurrent claim to commit, so this reads the winner's row.
            existing = await (await conn.execute(HOLDER, (owner, source_id))).fetchone()
            if existing is not None:
                # Undo the owner row: the new thread id stays unused.
                await conn.execute(f"DELETE FROM {thread_owners.TABLE} WHERE thread_id = %s", (thread_id,))
                return existing["thread_id"]
    raise RuntimeError(f"could not record the import of {source_id}")  # deleted and re-imported in between, twice


async def thread_of(pool: AsyncConnectionPool, owner: str, source_id: str) -> str | None:
    """The owner's thread that holds ``source_id``, if any."""
    async with pool.connection() as conn:
        row = await (await conn.execute(HOLDER, (owner, source_id))).fetchone()
    return row["thread_id"] if row else None
