"""The episodic index: every user and assistant message of every chat, one row each.

Derived data, like a search index: the checkpoints hold the conversation, this table
makes it searchable across chats (``memory.episodes`` writes it after each reply, keeps it
in step with the thread's branch, and rebuilds it from the checkpoints on ``reindex``).

A row keeps the message's owner, thread, id, position in the thread, role, time
(``sent_at``), plain text, the dates its relative phrases meant (``dates_meant``: "yesterday"
said on 8 May 2023 means "7 May 2023"; worked out here on every write, so no writer can leave
them out), a full-text vector of both (``'english'``: stemmed, so "painted" finds "painting";
words of other languages still match themselves) and the embedding.

The table is hash-partitioned by ``owner`` (``storage/partitions.py``: a statement's planner sees
one partition's indexes, the same few whatever the number of users). Every statement here names ``owner`` in its
WHERE clause (a router query: the same key would distribute it with Citus; ``docs/scaling.md``),
and the primary key starts with it. Nothing here joins across owners.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable, Sequence

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool

from core.errors import EmbeddingMismatch
from core.past_dates import RELATIVE_HINT, RULES as DATE_RULES, dates_meant, names_a_date
from core.stopwords import FULL_TEXT_STOP_LEXEMES
from core.text_validation import made_storable
from storage import owner_forgets, thread_owners
from storage.partitions import PARTITIONS, ann_scope, ann_settings, dims_of, hnsw_index, leaf_of, leaf_statements, relkind, resize_vectors, through_hnsw, to_partitioned
from storage.vector_literal import vector_literal

log = logging.getLogger(__name__)

TABLE = "memory_agent_episodes"
# How many messages each owner has in the index: kept by every write below in the same
# transaction (the search's idf needs it, and count(*) over a large owner's rows costs ~20 ms).
COUNTS = "memory_agent_episode_counts"

ANN_INDEX = f"{TABLE}_embedding_hnsw"
WORDS_INDEX = f"{TABLE}_words_gin"

# The words a row is found by: what was said (weight A), and the dates its relative phrases meant
# (weight D: a question naming 7 May finds "yesterday" said on 8 May; docs/episodic-memory.md has the
# measure). A question naming no date matches the A words alone (``search_statements``), so "I may
# have told you" does not find every message that meant a day in May.
WORDS = (
    "setweight(to_tsvector('english'::regconfig, content), 'A') || setweight(to_tsvector('english'::regconfig, dates_meant), 'D')"
)

# Lexemes a full-text match on them proves nothing (core/stopwords.py keeps every word list).
STOP_LEXEMES: tuple[str, ...] = tuple(sorted(FULL_TEXT_STOP_LEXEMES))


def create_statements(dims: int, *, partitions: int = PARTITIONS) -> list[str]:
    """The table, hash-partitioned by owner into ``partitions`` (``storage/partitions.py`` says
    why), its indexes and the per-owner counts. ``partitions=0`` gives the plain table of the old
    layout (kept for the migration's tests)."""
    partition_clause = " PARTITION BY HASH (owner)" if partitions else ""
    statements = [
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    owner text NOT NULL,
    thread_id text NOT NULL,
    message_id text NOT NULL,
    position integer NOT NULL,
    role text NOT NULL CHECK (role IN ('user', 'assistant')),
    sent_at timestamptz NOT NULL,
    content text NOT NULL,
    dates_meant text NOT NULL DEFAULT '',
    tsv tsvector GENERATED ALWAYS AS ({WORDS}) STORED,
    embedding vector({int(dims)}),
    PRIMARY KEY (owner, thread_id, message_id)
){partition_clause}"""
    ]
    statements += leaf_statements(TABLE, partitions)
    statements += [
        f"CREATE INDEX IF NOT EXISTS {TABLE}_thread_position ON {TABLE} (owner, thread_id, position)",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_owner_time ON {TABLE} (owner, sent_at)",
        # One HNSW and one GIN index per partition (created on the parent), for the owners of
        # LARGE_OWNER messages or more (``search``). A smaller owner's search reads their own rows
        # instead: a common word's posting list grows with everyone's messages (54 ms for one word
        # of a 1,000-message owner among 1,000,000 rows), filtering a small owner's rows costs
        # ~0.3 ms per 1,000.
        f"DROP INDEX IF EXISTS {TABLE}_tsv",
        *filter(None, [hnsw_index(ANN_INDEX, TABLE, dims)]),
        f"CREATE INDEX IF NOT EXISTS {WORDS_INDEX} ON {TABLE} USING gin (tsv)",
        f"CREATE TABLE IF NOT EXISTS {COUNTS} (owner text PRIMARY KEY, messages bigint NOT NULL)",
    ]
    return statements


# The columns a migration copies from an older layout (tsv is generated; dates_meant is worked out after).
COLUMNS = ("owner", "thread_id", "message_id", "position", "role", "sent_at", "content", "embedding")


async def _column_dims(conn: AsyncConnection) -> int | None:
    return await dims_of(conn, TABLE)


async def setup(pool: AsyncConnectionPool, dims: int) -> list[str]:
    """Idempotent; run by the backend's set-up under its schema lock. EmbeddingMismatch when the
    table was built for vectors of another size (``memory-agent reindex`` rebuilds it). A table of
    the old, unpartitioned layout is moved to the partitioned one (``memory-agent migrate`` does
    the same). Returns what was done, for the migrate command to say."""
    done: list[str] = []
    async with pool.connection() as conn:
        existing = await _column_dims(conn)
        if existing is not None and existing != dims:
            raise EmbeddingMismatch(
                f"The episodic index holds {existing}-dimensional vectors but the embeddings give {dims}; run `memory-agent reindex`."
            )
        kind = await relkind(conn, TABLE)
        async with conn.transaction():
            counted = await (await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (COUNTS,))).fetchone()
            stale_words = kind == "p" and not await _words_are_current(conn)
            dates_current = kind == "p" and await _dates_are_current(conn)
            stale_dates = kind == "p" and not stale_words and not dates_current
            if kind == "r":
                moved = await to_partitioned(conn, TABLE, create_statements(dims)[: PARTITIONS + 1], COLUMNS)
                done.append(f"{TABLE}: {moved} messages moved to {PARTITIONS} partitions by owner")
            elif stale_words:
                await _add_dates_meant(conn)
            if kind == "r" or stale_words:
                dated = await _work_out_dates_meant(conn)
                done.append(f"{TABLE}: the dates meant by the relative phrases of {dated} messages added to their words")
            elif stale_dates:
                changed = await _work_out_dates_meant(conn)
                if changed:
                    done.append(f"{TABLE}: the dates meant by {changed} messages worked out again by the current rules")
            built = await (await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (ANN_INDEX,))).fetchone()
            # pgvector builds much faster while the graph fits here (once, on a table of many rows).
            await conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
            for statement in create_statements(dims):
                if kind == "p" and " PARTITION OF " in statement:
                    continue  # partitioned already, maybe into another number of partitions: kept
                await conn.execute(statement)
            if kind is not None and not built["e"]:
                done.append(f"{TABLE}: HNSW and GIN indexes built, one of each per partition")
            if not dates_current:
                await conn.execute(sql.SQL("COMMENT ON COLUMN {}.dates_meant IS {}").format(sql.Identifier(TABLE), sql.Literal(f"{_DATES_MARK}{DATE_RULES}")))
            if not counted["e"]:  # an index from before the counts were kept: count it once
                await conn.execute(f"INSERT INTO {COUNTS} (owner, messages) SELECT owner, count(*) FROM {TABLE} GROUP BY owner")
    return done


async def _words_are_current(conn: AsyncConnection) -> bool:
    """Whether the table's words are ``WORDS`` (the text's and the dates_meant's, weighted)."""
    row = await (
        await conn.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) AS expr FROM pg_attrdef d "
            "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = to_regclass(%s) AND a.attname = 'tsv'",
            (TABLE,),
        )
    ).fetchone()
    return row is not None and "dates_meant" in row["expr"] and "setweight" in row["expr"]


# Which edition of core.past_dates' rules the stored dates_meant were worked out by (the
# column's comment): a set-up finds stored dates of older rules and works them out again (not
# those of newer rules: an older release started beside a newer one leaves them).
_DATES_MARK = "core.past_dates rules "


async def _dates_are_current(conn: AsyncConnection) -> bool:
    row = await (
        await conn.execute("SELECT col_description(to_regclass(%s), a.attnum) AS mark FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attname = 'dates_meant'", (TABLE, TABLE))
    ).fetchone()
    mark = (row or {}).get("mark") or ""
    edition = mark.removeprefix(_DATES_MARK)
    return mark.startswith(_DATES_MARK) and edition.isdigit() and int(edition) >= DATE_RULES


async def _add_dates_meant(conn: AsyncConnection) -> None:
    """A table from before dates_meant: the column, and the words recomputed from both (the GIN index
    goes with the old column; the set-up's statements build it again)."""
    await conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS dates_meant text NOT NULL DEFAULT ''")
    await conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN tsv")
    await conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({WORDS}) STORED")


async def _work_out_dates_meant(conn: AsyncConnection, batch: int = 5_000) -> int:
    """Every row's dates_meant from its text and time (the rows of an older table, once, in the
    set-up's transaction; again when the rules change). Only rows the hint matches are read,
    ``batch`` at a time through a server-side cursor, so a table of millions of messages is never
    held in memory at once. Returns how many got other dates than they had."""
    count = 0
    async with conn.cursor(name="memory_agent_dates_meant") as rows:
        await rows.execute(f"SELECT owner, thread_id, message_id, sent_at, content, dates_meant FROM {TABLE} WHERE content ~* %s", (RELATIVE_HINT,))
        while part := await rows.fetchmany(batch):
            dated = [(r["owner"], r["thread_id"], r["message_id"], dates_meant(r["content"], r["sent_at"]), r["dates_meant"]) for r in part]
            dated = [d[:4] for d in dated if d[3] != d[4]]
            if dated:
                await conn.execute(
                    f"UPDATE {TABLE} e SET dates_meant = d.dates FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS d(owner, thread_id, message_id, dates) "
                    "WHERE e.owner = d.owner AND e.thread_id = d.thread_id AND e.message_id = d.message_id",
                    [[d[i] for d in dated] for i in range(4)],
                )
            count += len(dated)
    return count


async def resize(conn: AsyncConnection, dims: int) -> None:
    """Empty the index and give it vectors of ``dims`` (reindex, after the embeddings changed)."""
    if await _column_dims(conn) is None:
        return  # not created yet: the set-up creates it at ``dims``
    async with conn.transaction():  # all or nothing: no emptied index left at the old size
        await conn.execute(f"DELETE FROM {TABLE}")
        await conn.execute(f"DELETE FROM {COUNTS}")
        await resize_vectors(conn, TABLE, ANN_INDEX, dims)


# --------------------------------------------------------------------------- rows
@dataclass
class Said:
    """A message of a thread as the index keeps it (a search's neighbouring turn is one)."""

    thread_id: str
    message_id: str
    position: int
    role: str
    sent_at: datetime
    content: str


@dataclass
class Episode(Said):
    """A row to write: the message, its owner and its embedding."""

    owner: str = ""
    embedding: Sequence[float] | None = None

    def __post_init__(self) -> None:
        # The index follows whatever a thread's state holds (an Overwrite of it skips the reducers
        # that make text storable: core.state); a row Postgres cannot store would fail every write.
        self.content = made_storable(self.content)
        self.message_id = made_storable(self.message_id)


def storable_ids(ids: Iterable[str]) -> list[str]:
    """Message ids as the index keeps them (:class:`Episode`): an id from the state may hold a NUL."""
    return [made_storable(i) for i in ids]


async def indexed_positions(pool: AsyncConnectionPool, owner: str, thread_id: str) -> dict[str, int]:
    """message id → position of the thread's indexed messages."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"SELECT message_id, position FROM {TABLE} WHERE owner = %s AND thread_id = %s", (owner, thread_id)
            )
        ).fetchall()
    return {r["message_id"]: r["position"] for r in rows}


# New rows first (what RETURNING gives back is exactly what the count gains), then the rows that
# were there already are rewritten. (RETURNING xmax cannot tell them apart on a partitioned table.)
_INSERT = f"""
INSERT INTO {TABLE} (owner, thread_id, message_id, position, role, sent_at, content, dates_meant, embedding)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::vector)
ON CONFLICT (owner, thread_id, message_id) DO NOTHING
RETURNING message_id
"""
_REWRITE = f"""
UPDATE {TABLE} SET position = %s, role = %s, sent_at = %s, content = %s, dates_meant = %s, embedding = %s::vector
WHERE owner = %s AND thread_id = %s AND message_id = %s
"""


async def _add_to_count(conn: AsyncConnection, owner: str, delta: int) -> bool:
    """Within the writer's transaction, after its rows: each delta is what that writer's own
    statements did, so concurrent writers of one owner add up exactly. Taken last, the count's
    row lock cannot close a cycle with the rows' locks. True when the owner's count rose past a
    statistics mark (:func:`refresh_statistics`)."""
    if not delta:
        return False
    row = await (await conn.execute(
        f"INSERT INTO {COUNTS} AS c (owner, messages) VALUES (%s, %s) "
        "ON CONFLICT (owner) DO UPDATE SET messages = c.messages + excluded.messages RETURNING messages",
        (owner, delta),
    )).fetchone()
    return passed_statistics_mark(int(row["messages"]) - delta, int(row["messages"]))


# The planner's statistics are refreshed for an owner's partition each time the owner's messages
# pass a power of two from this on. Until autovacuum's next ANALYZE (only after a tenth of the
# partition's rows changed) the planner takes a grown owner for the handful of rows it had, and
# reads every row of theirs where a key lookup would do: a chat of 2,000 messages searched in
# 60-100 ms instead of ~8. An owner has ~10 such marks in a lifetime; each ANALYZE samples one
# partition (~0.1 s at 16,000 rows on 2 cores).
STATISTICS_FROM = 512
STATISTICS_LOCK_WAIT = "200ms"


def passed_statistics_mark(before: int, after: int) -> bool:
    """Whether a count going from ``before`` to ``after`` rose past a mark (512, 1,024, 2,048, ...)."""
    if after < STATISTICS_FROM:
        return False
    return before < STATISTICS_FROM or after.bit_length() > before.bit_length()


async def refresh_statistics(conn: AsyncConnection, owners: Sequence[str]) -> None:
    """ANALYZE the partitions holding these owners' messages, each once, after the write that grew
    them committed. It waits at most ``STATISTICS_LOCK_WAIT`` for a partition that maintenance (a
    VACUUM, an index build, another writer's ANALYZE) holds; then, or on any other failure, it is
    logged and the write stands: the statistics only speed the search, and the owner's next mark
    tries again. The connection's own ``lock_timeout`` is as it was after. Unprepared: each
    partition's ANALYZE would take a slot of the connection's cache of prepared statements."""
    try:
        async with conn.transaction():  # a savepoint, when a caller's transaction is open
            parts = list(dict.fromkeys(filter(None, [await leaf_of(conn, TABLE, "owner", owner) for owner in owners])))
            if not parts:
                return
            had = (await (await conn.execute("SELECT current_setting('lock_timeout') AS t", prepare=False)).fetchone())["t"]
            await conn.execute("SELECT set_config('lock_timeout', %s, true)", (STATISTICS_LOCK_WAIT,), prepare=False)
            for part in parts:  # (regclass text: Postgres quotes it)
                await conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(part)), prepare=False)
            await conn.execute("SELECT set_config('lock_timeout', %s, true)", (had,), prepare=False)
    except psycopg.errors.LockNotAvailable:
        log.info("planner statistics not refreshed for %s's messages: their partition is busy", ", ".join(owners))
    except psycopg.Error as exc:
        log.warning("planner statistics not refreshed for %s's messages: %s", ", ".join(owners), exc)


async def sync_thread(
    pool: AsyncConnectionPool,
    owner: str,
    thread_id: str,
    *,
    keep: Sequence[str],
    write: Sequence[Episode],
    moved: dict[str, int] | None = None,
) -> int:
    """In one transaction: drop the thread's rows whose message is not in ``keep`` (a branch left
    by an edit or a regeneration), write ``write`` and move rows to new positions. Returns the
    number of rows dropped.

    ThreadTaken, with nothing written, when the thread is another user's: what one user said is
    never filed under a thread someone else owns, whichever caller asks. (A thread no one owns yet
    may be indexed: a graph run has claimed its thread before this, and an import before its rows.)"""
    for e in write:
        if e.owner != owner or e.thread_id != thread_id:
            raise ValueError("every episode written must be of the thread being synced")
    async with pool.connection() as conn:
        async with conn.transaction():
            await owner_forgets.check(conn, owner, owner_forgets.known_generation(owner))  # (OwnerForgotten: storage.owner_forgets)
            row = await (await conn.execute(thread_owners.CURRENT_OWNER_HELD, {"thread_id": thread_id})).fetchone()
            if row is not None and row["owner"] != owner:
                raise thread_owners.ThreadTaken(thread_id, row["owner"])
            cur = await conn.execute(
                f"DELETE FROM {TABLE} WHERE owner = %s AND thread_id = %s AND NOT (message_id = ANY(%s))",
                (owner, thread_id, storable_ids(keep)),
            )
            dropped = cur.rowcount
            inserted: set[str] = set()
            if write:
                vectors = [vector_literal(e.embedding) if e.embedding is not None else None for e in write]
                async with conn.cursor() as c:
                    await c.executemany(
                        _INSERT,
                        [(e.owner, e.thread_id, e.message_id, e.position, e.role, e.sent_at, e.content, dates_meant(e.content, e.sent_at), v) for e, v in zip(write, vectors)],
                        returning=True,
                    )
                    while True:
                        inserted.update(r["message_id"] for r in await c.fetchall())
                        if not c.nextset():
                            break
                    rewrite = [
                        (e.position, e.role, e.sent_at, e.content, dates_meant(e.content, e.sent_at), v, e.owner, e.thread_id, e.message_id)
                        for e, v in zip(write, vectors)
                        if e.message_id not in inserted
                    ]
                    if rewrite:
                        await c.executemany(_REWRITE, rewrite)
            if moved:
                await conn.execute(
                    f"UPDATE {TABLE} e SET position = m.position FROM unnest(%s::text[], %s::int[]) AS m(message_id, position) "
                    "WHERE e.owner = %s AND e.thread_id = %s AND e.message_id = m.message_id",
                    (storable_ids(moved), list(moved.values()), owner, thread_id),
                )
            grown = await _add_to_count(conn, owner, len(inserted) - dropped)
        if grown:  # after the commit, on the same connection: the rows' locks are not held through it
            await refresh_statistics(conn, [owner])
    return dropped


async def copy_episodes(conn: AsyncConnection, episodes: Sequence[Episode], *, analyze: bool = True) -> int:
    """Insert many new rows in one COPY (all or nothing; an existing key fails the whole COPY).
    For bulk seeding (benchmarks, tests): no per-row round trip.
    ``analyze=False`` leaves the statistics marks to a caller that runs ANALYZE once after a
    whole load of many owners (each would otherwise analyze their partition at each mark).

    Held to :func:`sync_thread`'s rules, nothing written otherwise: ThreadTaken when a thread is
    another user's, OwnerForgotten when an owner was forgotten since their caller was known."""
    from pgvector.psycopg.vector import register_vector_info
    import numpy as np

    async with conn.transaction(), conn.cursor() as cur:
        wanted = {e.thread_id: e.owner for e in episodes}
        for owner in sorted(set(wanted.values())):
            await owner_forgets.check(conn, owner, owner_forgets.known_generation(owner))
        rows = await (await conn.execute(thread_owners.OWNERS_HELD, {"thread_ids": list(wanted)})).fetchall()
        for e in episodes:  # one owner a thread, and never another user's
            if wanted[e.thread_id] != e.owner:
                raise ValueError(f"thread {e.thread_id} is given two owners in one copy")
        for row in rows:
            if row["owner"] != wanted[row["thread_id"]]:
                raise thread_owners.ThreadTaken(row["thread_id"], row["owner"])
        register_vector_info(cur, await TypeInfo.fetch(conn, "vector"))
        async with cur.copy(
            f"COPY {TABLE} (owner, thread_id, message_id, position, role, sent_at, content, dates_meant, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "int4", "text", "timestamptz", "text", "text", "vector"])
            for e in episodes:
                vector = None if e.embedding is None else np.asarray(e.embedding, dtype=np.float32)
                await copy.write_row((e.owner, e.thread_id, e.message_id, e.position, e.role, e.sent_at, e.content, dates_meant(e.content, e.sent_at), vector))
        per_owner: dict[str, int] = {}
        for e in episodes:
            per_owner[e.owner] = per_owner.get(e.owner, 0) + 1
        grown = [owner for owner, added in sorted(per_owner.items()) if await _add_to_count(conn, owner, added)]  # one order for every writer: no deadlock
    if grown and analyze:
        await refresh_statistics(conn, grown)
    return len(episodes)


async def delete_thread(pool: AsyncConnectionPool, owner: str, thread_id: str) -> int:
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE owner = %s AND thread_id = %s", (owner, thread_id))
        await _add_to_count(conn, owner, -cur.rowcount)
        return cur.rowcount


async def delete_messages(pool: AsyncConnectionPool, owner: str, thread_id: str, message_ids: Sequence[str]) -> int:
    if not message_ids:
        return 0
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            f"DELETE FROM {TABLE} WHERE owner = %s AND thread_id = %s AND message_id = ANY(%s)",
            (owner, thread_id, storable_ids(message_ids)),
        )
        await _add_to_count(conn, owner, -cur.rowcount)
        return cur.rowcount


async def delete_owner(pool: AsyncConnectionPool, owner: str) -> int:
    """Every message of the owner and their count."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(f"DELETE FROM {TABLE} WHERE owner = %s", (owner,))
        await _add_to_count(conn, owner, -cur.rowcount)
        # A turn indexed at the same moment may have added rows this DELETE did not see: then
        # the count stays, exact, with them.
        await conn.execute(f"DELETE FROM {COUNTS} WHERE owner = %s AND messages <= 0", (owner,))
        return cur.rowcount


async def count(pool: AsyncConnectionPool, owner: str) -> int:
    """The owner's messages in the index (kept by the writes: no scan of their rows)."""
    async with pool.connection() as conn:
        return await _count(conn, owner)


async def _count(conn: AsyncConnection, owner: str) -> int:
    row = await (await conn.execute(f"SELECT messages FROM {COUNTS} WHERE owner = %s", (owner,))).fetchone()
    return int(row["messages"]) if row else 0


# --------------------------------------------------------------------------- search
@dataclass
class Candidate(Said):
    """A message found by the full-text arm, the vector arm or both."""

    text_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    coverage: float = 0.0
    """The share of the query's words (idf-weighted within the owner's messages) the message holds."""
    before: Said | None = None
    after: Said | None = None
    """The indexed messages next to it in its thread (whatever the search's filters)."""


# Two statements. The words statement (the full-text arm: BM25-like, each query word counts by
# its rarity among the owner's messages; turns are short, so term frequency is left out) needs no
# embedding, so it runs while the query's embedding is computed. The rows statement then runs the
# vector arm and returns both arms' candidates with their ranks, similarity and word coverage (the
# words statement hands it the words' weights). For an owner below LARGE_OWNER messages both arms
# read the owner's rows: the vector arm is exact, the match is written as the functions behind the
# operators (``cosine_distance``, ``ts_match_vq``), which no index serves, so the planner cannot
# take the partition's shared indexes, built over everyone's rows there. From LARGE_OWNER on, the
# operators let it: the vector arm scans the partition's HNSW index iteratively (pgvector 0.8)
# until k of the owner's rows pass the filters, and the words come through its GIN index.
#
# The full-text arm's work is bounded per query word, whatever the owner's size: one scan per
# word reads up to ``per_word`` of the messages holding it; they are its candidates, and their
# count is its document frequency (a word more common than that weighs as if in ``per_word``
# messages: that common, it is nearly a stop word). So a message holding a rare word is always a
# candidate and a common word adds at most ``per_word``. (Before, every message of the owner
# holding any query word was read and weighed: 19,721 rows and 525 ms for one message at
# 100,000.) The message count comes from ``COUNTS``.
_WORDS = """
WITH lexemes AS (
    SELECT DISTINCT lexeme FROM unnest(to_tsvector('english'::regconfig, %(q)s)) AS t(lexeme, positions, weights)
    WHERE NOT (lexeme = ANY(%(stop)s::text[])) AND (char_length(lexeme) > 1 OR lexeme ~ '^[0-9]$')
), terms AS (
    SELECT lexeme, {term} AS tq FROM lexemes
), docs AS MATERIALIZED (
    SELECT coalesce((SELECT c.messages FROM {counts} c WHERE c.owner = {owner}), 0)::float8 AS n
), hits AS MATERIALIZED (
    SELECT t.lexeme, h.thread_id, h.message_id, h.sent_at, h.tsv
    FROM terms t CROSS JOIN LATERAL (
        SELECT e.thread_id, e.message_id, e.sent_at, e.tsv FROM {table} e
        WHERE e.owner = {owner} AND {words_match} AND {filters} LIMIT %(per_word)s
    ) h
), idf AS MATERIALIZED (
    SELECT t.lexeme, t.tq, d.df, ln(1 + (greatest(docs.n, d.df) - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM terms t CROSS JOIN docs CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM hits h WHERE h.lexeme = t.lexeme) d
), matched AS MATERIALIZED (
    SELECT DISTINCT ON (thread_id, message_id) thread_id, message_id, sent_at, tsv FROM hits
), latest AS MATERIALIZED (
    -- the owner's latest messages, where a word's share is read when its count cannot say
    -- (COMMON_SAMPLE); read only then (a CTE is computed when first scanned)
    SELECT e.tsv FROM {table} e WHERE e.owner = {owner} ORDER BY e.sent_at DESC LIMIT %(common_sample)s
), common AS (
    SELECT array_agg(i.lexeme) AS lexemes FROM idf i CROSS JOIN docs
    WHERE %(common_share)s::float8 IS NOT NULL AND docs.n > 0 AND CASE
        WHEN i.df >= greatest(%(common_share)s::float8 * docs.n, %(common_min)s::float8) THEN true
        -- counted whole (under the cap, over all the owner's messages): not common
        WHEN i.df < %(per_word)s AND %(since)s::timestamptz IS NULL AND %(until)s::timestamptz IS NULL THEN false
        ELSE (SELECT count(*) FILTER (WHERE l.tsv @@ i.tq) >= greatest(%(common_share)s::float8 * count(*), %(common_min)s::float8) FROM latest l)
    END
)
-- Messages of the same score (the same words matched) rank oldest first: where a thing was first
-- told, later mentions refer back to it (on the tuning split: docs/episodic-memory.md); the order
-- is then the conversation's, not the ids' (random at an import).
SELECT s.thread_id, s.message_id, row_number() OVER (ORDER BY s.score DESC, s.sent_at, s.thread_id, s.message_id) AS text_rank,
       (SELECT array_agg(lexeme ORDER BY lexeme) FROM idf) AS lexemes, (SELECT array_agg(idf ORDER BY lexeme) FROM idf) AS weights,
       -- the query's own words (as written: the text search parser's tokens, whatever the
       -- database's collation) whose lexeme is that common
       (SELECT array_agg(DISTINCT p.token ORDER BY p.token) FROM common c CROSS JOIN LATERAL ts_parse('default', %(q)s) p
        WHERE c.lexemes IS NOT NULL AND tsvector_to_array(to_tsvector('english'::regconfig, p.token)) && c.lexemes) AS common_words
FROM (SELECT m.thread_id, m.message_id, m.sent_at, (SELECT sum(i.idf) FROM idf i WHERE m.tsv @@ i.tq) AS score FROM matched m) s
ORDER BY s.score DESC, s.sent_at, s.thread_id, s.message_id
LIMIT %(k)s
"""
_ROWS = """
WITH idf AS (
    SELECT {term} AS tq, w.idf FROM unnest(%(lexemes)s::text[], %(weights)s::float8[]) AS w(lexeme, idf)
), text_top AS (
    SELECT * FROM unnest(%(text_threads)s::text[], %(text_messages)s::text[], %(text_ranks)s::int[]) AS t(thread_id, message_id, text_rank)
), nearest AS MATERIALIZED (
    SELECT e.thread_id, e.message_id, {distance} AS distance FROM {table} e
    WHERE e.owner = {owner} AND %(vector)s::vector IS NOT NULL AND e.embedding IS NOT NULL AND {filters}
    ORDER BY {distance}
    LIMIT %(k)s
), vector_top AS (
    SELECT thread_id, message_id, row_number() OVER (ORDER BY distance, thread_id, message_id) AS vector_rank FROM nearest
), chosen AS (
    -- both arms' messages, each once, with its rank in each (one hash join, not two nested loops)
    SELECT coalesce(t.thread_id, v.thread_id) AS thread_id, coalesce(t.message_id, v.message_id) AS message_id, t.text_rank, v.vector_rank
    FROM text_top t FULL JOIN vector_top v ON v.thread_id = t.thread_id AND v.message_id = t.message_id
)
SELECT e.thread_id, e.message_id, e.position, e.role, e.sent_at, e.content,
       c.text_rank, c.vector_rank,
       CASE WHEN %(similar_to)s::vector IS NULL OR e.embedding IS NULL THEN NULL ELSE 1 - (e.embedding <=> %(similar_to)s::vector) END AS similarity,
       coalesce((SELECT sum(i.idf) FROM idf i WHERE e.tsv @@ i.tq) / nullif((SELECT sum(idf) FROM idf), 0), 0) AS coverage,
       b.message_id AS before_id, b.position AS before_position, b.role AS before_role, b.sent_at AS before_sent_at, b.content AS before_content,
       a.message_id AS after_id, a.position AS after_position, a.role AS after_role, a.sent_at AS after_sent_at, a.content AS after_content
FROM chosen c
-- Each chosen message looked up by its key, whatever the owner's row estimate: joined plainly, a
-- stale estimate (a user's rows newer than the partition's statistics) let the planner scan the
-- owner's rows and rescan the candidates for each (LIMIT 1 keeps the subquery from being flattened).
CROSS JOIN LATERAL (
    SELECT * FROM {table} e WHERE e.owner = {owner} AND e.thread_id = c.thread_id AND e.message_id = c.message_id LIMIT 1
) e
-- the indexed messages just before and after it in its thread (a short turn reads with the one before it)
LEFT JOIN LATERAL (
    SELECT n.message_id, n.position, n.role, n.sent_at, n.content FROM {table} n
    WHERE n.owner = {owner} AND n.thread_id = e.thread_id AND n.position < e.position ORDER BY n.position DESC LIMIT 1
) b ON true
LEFT JOIN LATERAL (
    SELECT n.message_id, n.position, n.role, n.sent_at, n.content FROM {table} n
    WHERE n.owner = {owner} AND n.thread_id = e.thread_id AND n.position > e.position ORDER BY n.position LIMIT 1
) a ON true
"""
_FILTERS = """(%(since)s::timestamptz IS NULL OR e.sent_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR e.sent_at < %(until)s::timestamptz)
      AND NOT (e.thread_id = %(thread)s::text AND e.message_id = ANY(%(exclude)s::text[]))"""

# From this many messages on, an owner's search goes through the partition's indexes (an exact
# scan costs ~10 ms per thousand messages on 2 cores).
LARGE_OWNER = 5_000
# The full-text arm's bound (see _WORDS): up to PER_WORD messages holding a word are read, its
# candidates and its frequency. (300, where it counted up to 2,000 and then read 500: ~10 ms for a
# message at 100,000 instead of ~15; on LoCoMo, whose words are rarer, 0.800 answer words
# against 0.801.)
PER_WORD = 300
# Where a word's count cannot say whether a given share of the owner's messages holds it (it
# reached PER_WORD, or a span limited it), its share of the owner's latest COMMON_SAMPLE messages
# decides: a bounded read (~1 ms through (owner, sent_at)) at any size, and for an owner of no more
# messages than that, exact. (Counting to a tenth of 100,000 would read 10,000 rows a word.)
COMMON_SAMPLE = 1_000


# How each arm matches, by the owner's size (see above _WORDS).
_MATCH = {
    False: {"words": "ts_match_vq(e.tsv, t.tq)", "distance": "cosine_distance(e.embedding, %(vector)s::vector)"},
    True: {"words": "e.tsv @@ t.tq", "distance": "e.embedding <=> %(vector)s::vector"},
}


def search_statements(conn: AsyncConnection, owner: str, *, large: bool = False, dated: bool = False) -> tuple[sql.Composed, sql.Composed]:
    """The words and rows statements of ``owner``'s search (``large``: through the partition's
    indexes; ``dated``: the question names a date, and the dates the messages meant count as their words). The owner is written into every reference to the tables as a literal, never a
    parameter: then the planner prunes to the owner's partition at plan time, whatever plan a
    prepared statement would switch to. (``tests/integration/test_many_users.py`` checks it;
    ``benchmarks/bench_planning.py`` times their planning.) Run unprepared (``prepare=False``):
    a statement of one owner is no use to the next, and prepared, each owner's took slots of a
    connection's cache of prepared statements (psycopg's 100) from the statements every turn shares."""
    # A literal's "%" would read as a placeholder of the statement's parameters: doubled.
    owner_literal = sql.SQL(sql.Literal(owner).as_string(conn).replace("%", "%%"))
    match = _MATCH[large]

    def statement(text: str, lexeme: str) -> sql.Composed:
        term = f"quote_literal({lexeme})::tsquery" if dated else f"(quote_literal({lexeme}) || ':A')::tsquery"
        return sql.SQL(text).format(
            table=sql.Identifier(TABLE), counts=sql.Identifier(COUNTS), filters=sql.SQL(_FILTERS), owner=owner_literal,
            words_match=sql.SQL(match["words"]), distance=sql.SQL(match["distance"]), term=sql.SQL(term),
        )

    return statement(_WORDS, "lexeme"), statement(_ROWS, "w.lexeme")


async def search(
    pool: AsyncConnectionPool,
    owner: str,
    query: str,
    vector: Sequence[float] | Awaitable[Sequence[float]] | None,
    *,
    k: int = 30,
    since: datetime | None = None,
    until: datetime | None = None,
    thread_id: str | None = None,
    exclude: Sequence[str] = (),
    common_share: float | None = None,
    common_min: int = 1,
    without_words: Callable[[Sequence[float], list[str]], Awaitable[Sequence[float]]] | None = None,
) -> list[Candidate]:
    """The owner's messages best matching ``query`` by words and by ``vector`` (the top ``k`` of
    each arm), unordered; ``exclude`` lists message ids of ``thread_id`` to leave out. ``vector``
    may be still on its way (an awaitable): the words are searched meanwhile.

    With ``common_share`` and ``without_words``, the query's words held by at least that share of
    the owner's messages, and by at least ``common_min`` of them, are handed to ``without_words``
    with the vector, and the vector arm ranks by what it returns; each candidate's ``similarity``
    stays the similarity to ``vector`` itself. (A word counted past ``PER_WORD``, or in a span,
    is judged by its share of the owner's latest ``COMMON_SAMPLE`` messages.)"""
    params: dict[str, Any] = {
        "owner": owner,
        "q": query,
        "stop": list(STOP_LEXEMES),
        "k": int(k),
        "per_word": PER_WORD,
        "common_sample": COMMON_SAMPLE,
        "common_share": common_share if without_words is not None else None,
        "common_min": common_min,
        "since": since,
        "until": until,
        "thread": thread_id or "",
        "exclude": storable_ids(exclude),
    }
    async with pool.connection() as conn:
        # (No HNSW index where vectors of over 2,000 dimensions cannot have one: always exact.)
        size = await (await conn.execute(_SIZE, {"owner": owner, "index": ANN_INDEX})).fetchone()
        if not size["said"]:  # nothing said yet: nothing to find, and no vector to wait for
            if inspect.iscoroutine(vector):
                vector.close()
            return []
        large = size["n"] >= LARGE_OWNER and size["indexed"] and through_hnsw(size["n"], size["partition"], k)
        dated = names_a_date(query)
        words_statement, rows_statement = search_statements(conn, owner, large=large, dated=dated)

        async def words() -> list[dict[str, Any]]:
            return await (await conn.execute(words_statement, params, prepare=False)).fetchall()

        if inspect.isawaitable(vector):
            text_rows, vector = await asyncio.gather(words(), vector)
        else:
            text_rows = await words()
        ranking = vector
        common = text_rows[0]["common_words"] if text_rows else None
        if common and vector is not None and without_words is not None:
            ranking = await without_words(vector, list(common))
        params |= {
            "vector": vector_literal(ranking) if ranking is not None else None,
            "similar_to": vector_literal(vector) if vector is not None else None,
            "lexemes": text_rows[0]["lexemes"] if text_rows else [],
            "weights": text_rows[0]["weights"] if text_rows else [],
            "text_threads": [r["thread_id"] for r in text_rows],
            "text_messages": [r["message_id"] for r in text_rows],
            "text_ranks": [r["text_rank"] for r in text_rows],
        }
        rows = await _rows(conn, rows_statement, params, approximate=large)
        if large and params["vector"] is not None and sum(r["vector_rank"] is not None for r in rows) < min(k, size["n"]):
            # The HNSW scan gave up before k of the owner's rows passed the filters (a narrow time
            # window): the exact shape reads the owner's rows in it instead.
            rows = await _rows(conn, search_statements(conn, owner, large=False, dated=dated)[1], params, approximate=False)
    return [
        Candidate(
            thread_id=r["thread_id"], message_id=r["message_id"], position=r["position"], role=r["role"], sent_at=r["sent_at"],
            content=r["content"], text_rank=r["text_rank"], vector_rank=r["vector_rank"],
            similarity=None if r["similarity"] is None else float(r["similarity"]), coverage=float(r["coverage"] or 0.0),
            before=_said(r, "before_"), after=_said(r, "after_"),
        )
        for r in rows
    ]


# The owner's messages (kept by every write), their partition's rows (the statistics' estimate),
# whether the HNSW index exists (not above 2,000 dimensions), and whether the owner has a row at
# all (read from the table itself: a search that finds nothing must not hang on a counter).
_SIZE = f"""
SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE owner = %(owner)s) AS said,
       coalesce((SELECT messages FROM {COUNTS} WHERE owner = %(owner)s), 0) AS n,
       coalesce((SELECT greatest(c.reltuples, 0)::float8 FROM pg_class c
                 WHERE c.oid = (SELECT tableoid FROM {TABLE} WHERE owner = %(owner)s LIMIT 1)), 0) AS partition,
       to_regclass(%(index)s) IS NOT NULL AS indexed
"""


async def _rows(conn: AsyncConnection, statement: sql.Composed, params: dict[str, Any], *, approximate: bool) -> list[dict[str, Any]]:
    """The rows statement; through the partition's HNSW index with ``approximate``, in one round
    trip with its settings (``partitions.ann_scope``)."""
    if not approximate:
        return await (await conn.execute(statement, params, prepare=False)).fetchall()
    async with ann_scope(conn):
        for setting in ann_settings():
            await conn.execute(setting)
        cur = await conn.execute(statement, params, prepare=False)
        return await cur.fetchall()


def _said(row: dict[str, Any], prefix: str) -> Said | None:
    if row[prefix + "id"] is None:
        return None
    return Said(
        row["thread_id"], row[prefix + "id"], row[prefix + "position"], row[prefix + "role"], row[prefix + "sent_at"], row[prefix + "content"]
    )


