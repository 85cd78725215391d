"""Taking a turn back, deleting a chat, and forgetting a user everywhere.

A chat is a LangGraph thread (``thread_id`` = chat id) whose owner is the row the
server wrote in ``storage.thread_owners`` (not the record in a ``chats`` store
namespace, which only helps find the chat by topic).

Taking a turn back (a stopped or failed reply): checkpoint ids are time-ordered
(uuid6), the same order the saver lists them in, so everything a run wrote is what
is newer than the thread's head when it started: newer checkpoints, their pending
writes, writes added to the head itself (a resume answer), and blobs no remaining
checkpoint points to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from psycopg_pool import AsyncConnectionPool

from storage import api_keys, chat_runs, episodes, thread_owners, vector_search
from storage.user_transaction import lock_key
from core.namespaces import chats_ns, user_namespaces, user_root
from core.schemas import ChatRecord

GC_BLOBS = """
DELETE FROM checkpoint_blobs b
WHERE b.thread_id = %s AND NOT EXISTS (
    SELECT 1 FROM checkpoints c
    WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
      AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
)
"""


async def owned_ids(db, user_id: str, thread_ids: Iterable[str]) -> set[str]:
    """The ids among ``thread_ids`` the server recorded as ``user_id``'s. ``db`` is the pool or our
    Postgres store; any other store has no ownership records, so nothing is provably the user's."""
    pool = db if isinstance(db, AsyncConnectionPool) else thread_owners.pool_of(db)
    return await thread_owners.owned_among(pool, user_id, thread_ids) if pool is not None else set()


async def owned_chats(db, user_id: str, chats: Sequence[ChatRecord]) -> list[ChatRecord]:
    """Only the user's own chats: a record in their ``chats`` namespace proves nothing by itself."""
    mine = await owned_ids(db, user_id, (c.thread_id for c in chats))
    return [c for c in chats if c.thread_id in mine]


def _prefix(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)  # how the Postgres store keys namespaces


@dataclass(frozen=True)
class ThreadMark:
    """The head of a thread before a run: what a rollback returns to."""

    thread_id: str
    checkpoint_id: str | None
    head_writes: frozenset[str] = field(default_factory=frozenset)


async def mark_thread(pool: AsyncConnectionPool, thread_id: str) -> ThreadMark:
    async with pool.connection() as conn:
        head = await (
            await conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' "
                "ORDER BY checkpoint_id DESC LIMIT 1",
                (thread_id,),
            )
        ).fetchone()
        if head is None:
            return ThreadMark(thread_id, None)
        writes = await (
            await conn.execute(
                "SELECT task_id || ':' || idx AS k FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id = %s",
                (thread_id, head["checkpoint_id"]),
            )
        ).fetchall()
    return ThreadMark(thread_id, head["checkpoint_id"], frozenset(r["k"] for r in writes))


async def rollback_thread(pool: AsyncConnectionPool, mark: ThreadMark) -> list[str]:
    """Remove everything written to the thread after ``mark``, in one transaction; the removed checkpoint ids."""
    tid = mark.thread_id
    async with pool.connection() as conn:
        async with conn.transaction():
            if mark.checkpoint_id is None:
                await conn.execute("DELETE FROM checkpoint_writes WHERE thread_id = %s", (tid,))
                cur = await conn.execute("DELETE FROM checkpoints WHERE thread_id = %s RETURNING checkpoint_id", (tid,))
            else:
                await conn.execute(
                    "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id > %s", (tid, mark.checkpoint_id)
                )
                await conn.execute(
                    "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id = %s "
                    "AND NOT (task_id || ':' || idx = ANY(%s))",
                    (tid, mark.checkpoint_id, list(mark.head_writes)),
                )
                cur = await conn.execute(
                    "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id > %s RETURNING checkpoint_id",
                    (tid, mark.checkpoint_id),
                )
            removed = [r["checkpoint_id"] for r in await cur.fetchall()]
            await conn.execute(GC_BLOBS, (tid,))
    return removed


async def delete_chat(backend, user_id: str, thread_id: str) -> None:
    """The thread's checkpoints (all three tables), its record in the chats namespace, its messages
    in the episodic index, its run rows, and last its owner row (so a failure half-way leaves a
    chat its owner can still delete)."""
    await backend.checkpointer.adelete_thread(thread_id)
    await backend.store.adelete(chats_ns(user_id), thread_id)
    await episodes.delete_thread(backend.pool, user_id, thread_id)
    await chat_runs.delete_thread_runs(backend.pool, thread_id)
    await thread_owners.release(backend.pool, thread_id)


async def user_thread_ids(backend, user_id: str) -> list[str]:
    """Every thread of the user, as the server recorded it (never from the user's own store items)."""
    return await thread_owners.threads_of(backend.pool, user_id)


async def forget_user_everywhere(backend, user_id: str) -> dict[str, int]:
    """Delete everything of one user: the threads they own and their checkpoints, every store
    namespace under ``("users", user_id)`` (vectors go with their items), their messages in the
    episodic index, API keys, run rows and ownership rows."""
    threads = await user_thread_ids(backend, user_id)
    for thread_id in threads:
        await backend.checkpointer.adelete_thread(thread_id)
    root = _prefix(user_root(user_id))
    async with backend.pool.connection() as conn, conn.transaction():
        # Under the user's write lock: an extraction running now commits before, or sees nothing after.
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(user_id),))
        # left() instead of LIKE: a user id may contain LIKE wildcards (_ and %).
        cur = await conn.execute(
            "DELETE FROM store WHERE prefix = %s OR left(prefix, %s) = %s", (root, len(root) + 1, root + ".")
        )
        items = cur.rowcount
    # A large namespace has an HNSW index of its own; its rows are gone, so is it.
    for namespace in user_namespaces(user_id):
        await vector_search.drop_namespace_index(backend.pool, namespace)
    said = await episodes.delete_owner(backend.pool, user_id)
    keys = await api_keys.delete_user_keys(backend.pool, user_id)
    runs = await chat_runs.delete_user_runs(backend.pool, user_id)
    await thread_owners.release_all(backend.pool, user_id)
    return {"chats": len(threads), "memories": items, "messages": said, "api_keys": keys, "runs": runs}
