"""The per-user tables' layout: hash-partitioned by owner, indexes of one owner on one partition.

Postgres' planner considers every index of a table (partial ones included: it tests each one's
predicate) for every reference to the table in a statement. With a partial index per large
user on one table, every statement of every user paid for all of them: 244 ms to plan the
episodic search with 3,000 large users (issue 27; ``benchmarks/bench_planning.py``). Here each
per-user table is hash-partitioned into ``PARTITIONS`` partitions by its owner column, every
search names the owner as a literal, so the planner prunes to one partition at plan time and
only looks at that partition's indexes: a large user's own index lives on their partition, and
a statement sees about ``large users / PARTITIONS`` of them (~47 at 3,000 large users), not all.

The partitions are created once, by the set-up / ``memory-agent migrate`` (``to_partitioned``
moves a table of the old layout over, rows and all); a large user's own index is built on
their partition CONCURRENTLY, so it never blocks another user's reads or writes (a build on the
partitioned parent could not be concurrent: issue 31 measured 6.3 s of another owner's write
held up). Forgetting the owner stops a running build and drops what it built (``stop_and_drop``).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Sequence

from psycopg import AsyncConnection, sql

log = logging.getLogger(__name__)

# Fixed when a table is created or migrated (changing it means migrating again). 64: at 3,000
# large users ~47 own indexes per partition, the search statements plan in well under 2 ms.
PARTITIONS = 64


async def relkind(conn: AsyncConnection, table: str) -> str | None:
    """'p' partitioned, 'r' plain, None when the table does not exist."""
    row = await (await conn.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (table,))).fetchone()
    return None if row is None else str(row["relkind"])


def leaf_statements(table: str, partitions: int) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS {table}_p{i} PARTITION OF {table} FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
        for i in range(partitions)
    ]


async def to_partitioned(conn: AsyncConnection, table: str, create: Sequence[str], columns: Sequence[str]) -> int:
    """Move the plain ``table`` to the partitioned layout in one transaction (all or nothing):
    rename it away, run ``create`` (the partitioned table, its partitions and indexes), copy
    ``columns`` of every row, drop the old table. Its indexes go with it (the owners' own ones
    are rebuilt on their partitions afterwards). Returns the rows moved."""
    old = f"{table}_unpartitioned"
    async with conn.transaction():
        # The old table's index names (its primary key's included) would collide with the new ones.
        indexes = await (
            await conn.execute(
                "SELECT i.relname, c.conname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid "
                "WHERE x.indrelid = to_regclass(%s)",
                (table,),
            )
        ).fetchall()
        for index in indexes:
            if index["conname"] is None:
                await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index["relname"])))
            else:
                await conn.execute(
                    sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                        sql.Identifier(table), sql.Identifier(index["conname"]), sql.Identifier(f"{index['conname']}_old")
                    )
                )
        await conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(table), sql.Identifier(old)))
        for statement in create:
            await conn.execute(statement)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        cur = await conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(sql.Identifier(table), cols, cols, sql.Identifier(old))
        )
        moved = cur.rowcount
        await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(old)))
    log.info("moved %s to %d hash partitions (%d rows)", table, PARTITIONS, moved)
    return moved


async def leaf_of(conn: AsyncConnection, table: str, column: str, value: str) -> str | None:
    """The partition holding ``column = value``'s rows (None when there are none)."""
    row = await (
        await conn.execute(
            sql.SQL("SELECT tableoid::regclass::text AS leaf FROM {} WHERE {} = %s LIMIT 1").format(
                sql.Identifier(table), sql.Identifier(column)
            ),
            (value,),
        )
    ).fetchone()
    return None if row is None else row["leaf"]


async def valid_indexes(conn: AsyncConnection, names: Sequence[str]) -> set[str]:
    rows = await (
        await conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relname = ANY(%s) AND i.indisvalid",
            (list(names),),
        )
    ).fetchall()
    return {r["relname"] for r in rows}


async def advisory_lock(conn: AsyncConnection, name: str) -> None:
    """Take the session advisory lock ``hashtext(name)``, waiting between short tries: a blocking
    pg_advisory_lock waits inside a statement, and CREATE/DROP INDEX CONCURRENTLY elsewhere waits
    for every running statement to end, so holder and waiter would deadlock."""
    delay = 0.02
    while not (await (await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS got", (name,))).fetchone())["got"]:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


@asynccontextmanager
async def one_ddl_per_leaf(conn: AsyncConnection, leaf: str) -> AsyncIterator[None]:
    """Two concurrent index builds (or drops) on one table deadlock: each waits for the other's
    transaction to end before it can finish (measured: two large users hashed to one partition).
    So they take turns per partition, on an advisory lock."""
    await advisory_lock(conn, f"ddl:{leaf}")
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"ddl:{leaf}",))


async def build_on_leaf(conn: AsyncConnection, leaf: str, name: str, method: sql.Composable, predicate: sql.Composable) -> None:
    """``CREATE INDEX CONCURRENTLY name ON leaf USING method WHERE predicate``; ``conn`` must be in
    autocommit. A failed earlier build's invalid index is dropped first (IF NOT EXISTS would keep it)."""
    async with one_ddl_per_leaf(conn, leaf):
        await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        await conn.execute(
            sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} USING {} WHERE {}").format(
                sql.Identifier(name), sql.SQL(leaf), method, predicate
            )
        )


# The advisory lock a build holds (pg_try_advisory_lock(hashtext(name))), as pg_locks shows it.
_HOLDER = """
SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() AND objsubid = 1
  AND classid::bigint = ((hashtext(%(name)s)::bigint >> 32) & 4294967295)
  AND objid::bigint = (hashtext(%(name)s)::bigint & 4294967295)
"""


async def stop_and_drop(conn: AsyncConnection, lock_name: str, index_names: Sequence[str]) -> None:
    """Forget-me's part: cancel a build of these indexes running under ``lock_name`` (another
    session), wait for it to let go, then drop whatever exists of them. Concurrently: nobody
    else's reads or writes wait. Once the lock is ours no new build can start, and the owner's
    rows are gone by then, so none starts afterwards either."""
    for row in await (await conn.execute(_HOLDER, {"name": lock_name})).fetchall():
        await conn.execute("SELECT pg_cancel_backend(%s)", (row["pid"],))
    await advisory_lock(conn, lock_name)
    try:
        tables = await (
            await conn.execute(
                "SELECT c.relname AS index, x.indrelid::regclass::text AS leaf FROM pg_class c JOIN pg_index x ON x.indexrelid = c.oid "
                "WHERE c.relname = ANY(%s)",
                (list(index_names),),
            )
        ).fetchall()
        for row in tables:
            async with one_ddl_per_leaf(conn, row["leaf"]):
                await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(row["index"])))
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_name,))
