"""Rows of LangGraph's checkpoint tables (checkpoints, checkpoint_writes, checkpoint_blobs) that
the saver has no call for: the head of a thread before a run, taking a run's writes back, and
rewriting channels of a head in place (a forget).

Checkpoint ids are time-ordered (uuid6), the order the saver lists them in, so everything a
run wrote is what is newer than the thread's head when it started: newer checkpoints, their
pending writes, writes added to the head itself (a resume answer), and blobs no remaining
checkpoint points to.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from core.errors import SettingError

from storage.checkpoint_serde import CheckpointSerializer


GC_BLOBS = """
DELETE FROM checkpoint_blobs b
WHERE b.thread_id = %s AND NOT EXISTS (
    SELECT 1 FROM checkpoints c
    WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
      AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
)
"""


HISTORY_ENV = "MEMORY_AGENT_HISTORY_TURNS"
DEFAULT_HISTORY_TURNS = 50


def history_turns() -> int:
    """The documented setting: how many of a chat's turns keep their checkpoints (unset or empty:
    the default; 0 keeps every one); a clear error for a bad value."""
    raw = os.environ.get(HISTORY_ENV, "").strip()
    if not raw:
        return DEFAULT_HISTORY_TURNS
    if not raw.isdigit():
        raise SettingError(f"{HISTORY_ENV}={raw!r}: give a whole number of turns (0 keeps every checkpoint)")
    return int(raw)


# A turn starts where the thread's turn counter (the state's ``user_turns``, which load_context
# counts up once a turn whatever the run's durability) takes a new version: that version's first
# checkpoint on the head's branch, found by following parent links from the head (the newest
# checkpoint: ids are uuid6, time-ordered). Not by time across branches: an edit forks from an older
# checkpoint, and the abandoned branch's turns must not count as the current branch's.
BRANCH = """
WITH RECURSIVE branch AS (
    (SELECT checkpoint_id, parent_checkpoint_id, checkpoint -> 'channel_versions' ->> 'user_turns' AS turn
     FROM checkpoints WHERE thread_id = %(thread)s AND checkpoint_ns = ''
     ORDER BY checkpoint_id DESC LIMIT 1)
    UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint -> 'channel_versions' ->> 'user_turns'
    FROM checkpoints c JOIN branch b ON c.checkpoint_id = b.parent_checkpoint_id
    WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = ''
)
"""
"""The head's branch: parent links from the newest checkpoint, ids and turn versions only (no blob read)."""

TURN_STARTS = BRANCH + "SELECT min(checkpoint_id) AS started FROM branch GROUP BY turn ORDER BY started DESC"


async def branch_ids(pool: AsyncConnectionPool, thread_id: str) -> list[str]:
    """The checkpoint ids of the thread's current branch, the head first."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(BRANCH + "SELECT checkpoint_id FROM branch", {"thread": thread_id})).fetchall()
    return sorted((r["checkpoint_id"] for r in rows), reverse=True)  # uuid6: newer ids sort after older


async def trim_history(pool: AsyncConnectionPool, thread_id: str, keep_turns: int) -> int:
    """Delete the chat's checkpoints older than the ``keep_turns`` newest turns of its current branch
    (of any branch: an abandoned one's older checkpoints too), their pending writes and the blobs no
    remaining checkpoint points to; how many checkpoints went.

    Every turn writes the whole message list again (LangGraph's checkpoint format), so kept forever
    a chat's history grows with the square of its length (~100 KB a turn at 2,000 messages after
    Postgres' compression). Editing a message, regenerating a reply and Studio's time travel reach
    back this far; older messages stay in the chat, and an edit of one is refused (history_unavailable)."""
    if keep_turns <= 0:
        return 0
    async with pool.connection() as conn:
        async with conn.transaction():
            # The start of the turn before the kept ones: its checkpoints stay, as the fork point
            # (where it ended) of the oldest kept turn's message.
            cut = await (await conn.execute(f"{TURN_STARTS} OFFSET %(keep)s LIMIT 1", {"thread": thread_id, "keep": keep_turns})).fetchone()
            if cut is None:
                return 0
            await conn.execute(
                "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id < %s",
                (thread_id, cut["started"]),
            )
            cur = await conn.execute(
                "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id < %s",
                (thread_id, cut["started"]),
            )
            removed = cur.rowcount
            if removed:
                await conn.execute(GC_BLOBS, (thread_id,))
    return removed


@dataclass(frozen=True)
class ThreadMark:
    """The head of a thread before a run: what a rollback returns to."""

    thread_id: str
    checkpoint_id: str | None
    head_writes: frozenset[str] = field(default_factory=frozenset)


async def mark_thread(pool: AsyncConnectionPool, thread_id: str) -> ThreadMark:
    # One statement (a round trip before every reply): the head, and the writes already on it.
    async with pool.connection() as conn:
        head = await (
            await conn.execute(
                "SELECT h.checkpoint_id, ARRAY(SELECT w.task_id || ':' || w.idx FROM checkpoint_writes w "
                "WHERE w.thread_id = %(t)s AND w.checkpoint_id = h.checkpoint_id) AS writes "
                "FROM (SELECT checkpoint_id FROM checkpoints WHERE thread_id = %(t)s AND checkpoint_ns = '' "
                "ORDER BY checkpoint_id DESC LIMIT 1) h",
                {"t": thread_id},
            )
        ).fetchone()
    if head is None:
        return ThreadMark(thread_id, None)
    return ThreadMark(thread_id, head["checkpoint_id"], frozenset(head["writes"]))


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


HEAD = (
    "SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' "
    "ORDER BY checkpoint_id DESC LIMIT 1 FOR UPDATE"
)


async def rewrite_head(pool: AsyncConnectionPool, thread_id: str, channels: Sequence[str], change: Callable[[dict], dict]) -> list[str]:
    """Rewrite channels of the thread's head checkpoint in place: ``change`` gets the head's values
    of ``channels`` (those it holds) and returns the ones to replace, which are written as new blobs
    the head points to. The channels rewritten (none when the thread has no head or nothing changed).

    In place, not as a new checkpoint: the head keeps its id and its pending writes (a turn waiting
    for the user's confirmation keeps its question), a stopped turn's rollback to it keeps the
    change, and a forget rewriting every chat of a user adds nothing to their histories. Only the
    messages' channel is large, and it is neither read nor written. The head's row is locked, so
    two rewrites of one head queue."""
    serde = CheckpointSerializer()
    async with pool.connection() as conn:
        async with conn.transaction():
            head = await (await conn.execute(HEAD, (thread_id,))).fetchone()
            if head is None:
                return []
            checkpoint = head["checkpoint"]
            versions = {c: v for c, v in (checkpoint.get("channel_versions") or {}).items() if c in channels}
            if not versions:
                return []
            rows = await (
                await conn.execute(
                    "SELECT channel, type, blob FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = '' "
                    "AND (channel, version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
                    (thread_id, list(versions), list(versions.values())),
                )
            ).fetchall()
            values = {r["channel"]: serde.loads_typed((r["type"], r["blob"])) for r in rows if r["type"] != "empty"}
            new = {c: v for c, v in change(values).items() if c in versions}
            if not new:
                return []
            bumped = {c: _next_version(versions[c]) for c in new}
            for channel, value in new.items():
                kind, blob = serde.dumps_typed(value)
                await conn.execute(
                    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) VALUES (%s, '', %s, %s, %s, %s)",
                    (thread_id, channel, bumped[channel], kind, blob),
                )
            await conn.execute(
                "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_versions}', (checkpoint -> 'channel_versions') || %s::jsonb) "
                "WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = %s",
                (json.dumps(bumped), thread_id, head["checkpoint_id"]),
            )
    return sorted(new)


def _next_version(current: str | int | None) -> str:
    """The next version of a channel, as the saver makes them (a random part: never one a running turn also makes)."""
    return AsyncPostgresSaver.get_next_version(None, current, None)  # type: ignore[arg-type]
