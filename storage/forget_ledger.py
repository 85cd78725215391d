"""The record of what each user had the agent forget (``memory_agent_forgotten``).

One row per forget: the owner, what kind of item it was, the salted hashes of its distinctive
word stems (core.redaction; never the words), where they are hidden (``scope``: "all" text, or
only "replies", what the agent said: a message deleted outright), and the messages it came from. It is what keeps a
forgotten thing from coming back: core.redaction.Redactor is built from these rows for every
model call, every index write and every extraction. Forget-me deletes the owner's rows.
Every statement names the owner (the distribution column a sharded deployment would use).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from core.redaction import Redactor, deleted_hashes, term_hashes
from storage.memory_store import memory_store

TABLE = "memory_agent_forgotten"

CREATE = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        owner text NOT NULL,
        id text NOT NULL,
        kind text NOT NULL,
        forgotten_at timestamptz NOT NULL DEFAULT now(),
        hashes text[] NOT NULL,
        messages jsonb NOT NULL DEFAULT '[]'::jsonb,
        PRIMARY KEY (owner, id)
    )""",
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT 'all'",
)

ALL = "all"
REPLIES = "replies"
"""The scope of a deleted message's words: hidden in what the agent said (a reply that quoted it),
not in the user's own other messages."""


@dataclass(frozen=True)
class ForgetRecord:
    id: str
    kind: str
    forgotten_at: datetime
    messages: int


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        for statement in CREATE:
            await conn.execute(statement)


async def record(
    conn: AsyncConnection, owner: str, kind: str, hashes: Iterable[str], messages: Sequence[tuple[str, str]], *, scope: str = ALL
) -> str:
    """Add one forget (inside the caller's transaction, under the user's lock); its id."""
    forget_id = str(uuid.uuid4())
    await conn.execute(
        f"INSERT INTO {TABLE} (owner, id, kind, hashes, messages, scope) VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
        (owner, forget_id, kind, sorted(set(hashes)), json.dumps([list(m) for m in dict.fromkeys(messages)]), scope),
    )
    return forget_id


async def _rows(conn: AsyncConnection, owner: str) -> list[dict[str, Any]]:
    return await (
        await conn.execute(f"SELECT id, kind, forgotten_at, hashes, messages, scope FROM {TABLE} WHERE owner = %s ORDER BY forgotten_at", (owner,))
    ).fetchall()


async def redactor(db: AsyncConnectionPool | AsyncConnection | None, owner: str) -> Redactor:
    """The owner's redactor (an empty one when nothing was forgotten, or there is no database)."""
    if db is None:
        return Redactor(owner)
    if isinstance(db, AsyncConnectionPool):
        async with db.connection() as conn:
            rows = await _rows(conn, owner)
    else:
        rows = await _rows(db, owner)
    hashes = frozenset(h for r in rows if r["scope"] != REPLIES for h in r["hashes"])
    in_replies = frozenset(h for r in rows if r["scope"] == REPLIES for h in r["hashes"]) - hashes
    messages = frozenset((m[0], m[1]) for r in rows for m in r["messages"] if isinstance(m, list) and len(m) == 2)
    return Redactor(owner, hashes, messages, in_replies)


async def records(pool: AsyncConnectionPool, owner: str) -> list[ForgetRecord]:
    async with pool.connection() as conn:
        rows = await _rows(conn, owner)
    return [ForgetRecord(r["id"], r["kind"], r["forgotten_at"], len(r["messages"])) for r in rows]


async def hide_message(conn: AsyncConnection, owner: str, thread_id: str, message_id: str, text: str = "") -> str:
    """Hide one message whole (the user deleted it from the transcript), and the distinctive words of
    its ``text`` (the user's message) in every reply, where one may have quoted it."""
    hashes = deleted_hashes(owner, text) if text.strip() else set()
    return await record(conn, owner, "message", hashes, [(thread_id, message_id)], scope=REPLIES)


async def delete_owner(pool: AsyncConnectionPool, owner: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE owner = %s", (owner,))
        return cur.rowcount


async def redactor_of_store(store, owner: str) -> Redactor:
    """The redactor read through a store's own connection (the writer's transaction sees a forget
    that committed before it took the user's lock)."""
    return await redactor(memory_store(store).conn, owner)


async def lift_of_store(store, owner: str, texts: list[str]) -> None:
    """End the forgets of the words of ``texts`` (the user typed them into their memory themselves),
    through the store's own connection (the writer's transaction)."""
    hashes = sorted(term_hashes(owner, texts))
    if not hashes:
        return
    await memory_store(store).conn.execute(
        f"UPDATE {TABLE} SET hashes = ARRAY(SELECT unnest(hashes) EXCEPT SELECT unnest(%s::text[])) "
        "WHERE owner = %s AND hashes && %s::text[]",
        (hashes, owner, hashes),
    )
