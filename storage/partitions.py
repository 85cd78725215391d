"""The per-user tables' layout: hash-partitioned by owner, with no index of any one user.

Postgres' planner considers every index of a table (partial ones included: it tests each one's
predicate) for every reference to the table in a statement. The old layout gave each large user
partial indexes of their own (pgvector 0.6 had no iterative index scans, so a shared HNSW index
filtered to one user returned too few rows): every statement of every user paid for all of them,
244 ms to plan the episodic search with 3,000 large users (issue 27). With pgvector 0.8's
iterative scans a shared HNSW index keeps scanning until enough rows pass the owner filter, so
no user has an index of their own and no index is built while serving: each per-user table is
hash-partitioned into ``PARTITIONS`` partitions by its owner column, each partition has the same
few indexes, and every search names the owner as a literal, so the planner prunes to one
partition at plan time. What a statement's planner weighs is then the same whatever the number
of users (``benchmarks/bench_planning.py``).

The partitions are created once, by the set-up / ``memory-agent migrate`` (``to_partitioned``
moves a table of the older, plain layout over, rows and all; ``drop_old_own_indexes`` drops the
per-user indexes an older version built).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Sequence

from psycopg import AsyncConnection, sql
from psycopg.pq import TransactionStatus

log = logging.getLogger(__name__)

# Fixed when a table is created or migrated (changing it means migrating again). 64: a partition's
# shared HNSW index stays a 64th of the table, so it is quicker to build and to keep up to date.
PARTITIONS = 64


async def relkind(conn: AsyncConnection, table: str) -> str | None:
    """'p' partitioned, 'r' plain, None when the table does not exist."""
    row = await (await conn.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (table,))).fetchone()
    return None if row is None else str(row["relkind"])


async def leaf_of(conn: AsyncConnection, table: str, column: str, value: str) -> str | None:
    """The partition holding ``table``'s rows whose ``column`` (the partition key) is ``value``, as
    regclass text (Postgres quotes it); the table itself when it is plain; None without such rows."""
    row = await (await conn.execute(f"SELECT tableoid::regclass::text AS leaf FROM {table} WHERE {column} = %s LIMIT 1", (value,))).fetchone()
    return None if row is None else row["leaf"]


def leaf_statements(table: str, partitions: int) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS {table}_p{i} PARTITION OF {table} FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
        for i in range(partitions)
    ]


async def to_partitioned(conn: AsyncConnection, table: str, create: Sequence[str], columns: Sequence[str]) -> int:
    """Move the plain ``table`` to the partitioned layout in one transaction (all or nothing):
    rename it away, run ``create`` (the partitioned table, its partitions and indexes), copy
    ``columns`` of every row, drop the old table. Its indexes go with it. Returns the rows moved."""
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


# The shared HNSW indexes and their scans, one definition for both tables. pgvector indexes
# vectors of at most 2,000 dimensions with HNSW: above (3,072-d embeddings) there is no index and
# every search is exact.
HNSW_MAX_DIMS = 2_000
HNSW_PARAMS = "m = 16, ef_construction = 64"
# The scan's candidate list (hnsw.ef_search), and the most rows an iterative scan visits before it
# gives up (hnsw.max_scan_tuples).
ANN_EF_SEARCH = 200
ANN_MAX_SCAN = 20_000


def through_hnsw(owner_rows: int, partition_rows: float, wanted: int) -> bool:
    """Whether a partition's shared HNSW index is the cheaper way to ``wanted`` of an owner's
    nearest rows. Its iterative scan passes about ``wanted × partition_rows / owner_rows`` rows
    (the owner holds that share of them); an exact scan reads the owner's ``owner_rows``. So a
    large owner among many as large on one partition is searched exactly (measured: 250 items
    among 4,000 took 40 ms through the index, 4.6 ms exactly), a dominant one through the index."""
    return owner_rows > 0 and wanted * max(partition_rows, owner_rows) < owner_rows * owner_rows


def hnsw_index(name: str, table: str, dims: int) -> str | None:
    """The statement creating ``table``'s shared HNSW index (one per partition), or None when
    vectors of ``dims`` cannot have one."""
    if dims > HNSW_MAX_DIMS:
        return None
    return f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw (embedding vector_cosine_ops) WITH ({HNSW_PARAMS})"


def ann_settings() -> tuple[str, ...]:
    """A search through a shared HNSW index, for the transaction: iterative (pgvector 0.8) so it
    goes on until enough of the owner's rows pass the filter; strict_order, so the rows come
    nearest first and LIMIT keeps the nearest. One statement each: pipeline mode sends no
    multi-statement strings."""
    return (
        f"SET LOCAL hnsw.ef_search = {int(ANN_EF_SEARCH)}",
        "SET LOCAL hnsw.iterative_scan = strict_order",
        f"SET LOCAL hnsw.max_scan_tuples = {int(ANN_MAX_SCAN)}",
    )


@asynccontextmanager
async def ann_scope(conn: AsyncConnection) -> AsyncIterator[None]:
    """One round trip for a read through a shared HNSW index: a pipeline and a transaction for
    :func:`ann_settings`' SET LOCALs, which end with it. It ends without a ROLLBACK where it can:
    psycopg empties a connection's whole cache of prepared statements on a ROLLBACK (and has the
    server DEALLOCATE ALL), so each search that rolled back its settings had every later statement
    on the connection prepared again. At top level it commits (the work only reads); inside a
    caller's transaction it rolls back its savepoint, whose release would leave the settings in
    force for the rest of the caller's transaction."""
    nested = conn.info.transaction_status != TransactionStatus.IDLE
    async with conn.pipeline(), conn.transaction(force_rollback=nested):
        yield


async def dims_of(conn: AsyncConnection, table: str) -> int | None:
    """The size of ``table``'s ``embedding`` vectors (None when it has no such column yet)."""
    row = await (
        await conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'", (table,))
    ).fetchone()
    return int(row["atttypmod"]) if row else None


async def resize_vectors(conn: AsyncConnection, table: str, index: str, dims: int) -> None:
    """Give ``table``'s (emptied) ``embedding`` column vectors of ``dims``, its HNSW index with it:
    dropped first (an index of over 2,000 dimensions cannot be rebuilt), re-created when it can be."""
    await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index)))
    await conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector({})").format(sql.Identifier(table), sql.Literal(int(dims))))
    if (statement := hnsw_index(index, table, dims)) is not None:
        await conn.execute(statement)


# The old layout's own indexes of large users (before pgvector 0.8): partial HNSW / GIN indexes
# named after a hash of the owner or namespace. The set-up drops them (``drop_old_own_indexes``).
OLD_OWN_INDEX = r"^(memory_agent_episodes_(hnsw|gin)|store_vectors_ns)_[0-9a-f]{24}$"


async def drop_old_own_indexes(pool) -> list[str]:
    """Drop the per-user indexes an older version built on either table (the shared per-partition
    indexes replace them); says how many, for ``migrate``. Quick: a step of the set-up, under its
    lock, before either table's."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname ~ %s AND relnamespace = current_schema()::regnamespace",
                (OLD_OWN_INDEX,),
            )
        ).fetchall()
        for row in rows:
            await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(row["relname"])))
    return [f"dropped {len(rows)} per-user indexes of the old layout (one shared index per partition replaces them)"] if rows else []
