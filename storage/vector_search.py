"""One user's nearest memories in the store tables every user shares.

The store (langgraph's ``AsyncPostgresStore``) keeps every user's items in one ``store``
table and their embeddings in ``store_vectors``, which this module's set-up hash-partitions
by namespace (``storage/partitions.py``); each partition has one HNSW index over its vectors,
searched with pgvector 0.8's iterative scans: the scan goes on until ``k`` of the namespace's
rows pass the filter (pgvector 0.6.2 stopped at ``hnsw.ef_search`` rows of everyone's, then
filtered: recall@10 0.07 to 0.70 with 1,000 users, ``benchmarks/bench_recall.py``). Two plans,
both per namespace:

- **Exact** (every namespace below ``LARGE_NAMESPACE`` items): the namespace's vectors are
  read through a btree on ``store_vectors.prefix`` in its partition, every distance
  computed, and the nearest joined to their items in distance order until ``k`` pass the
  filter. Cost grows with the user's own memories, never with everyone's; the answer is
  exact. The distances are computed in a MATERIALIZED step, with ``cosine_distance()`` rather
  than ``<=>``, so the planner cannot take the shared HNSW index for it.
- **The partition's HNSW index, iteratively** (namespaces of ``LARGE_NAMESPACE`` items or more;
  an exact scan costs ~10-25 ms per thousand items on the benchmark's 2 cores, ~1 s at
  100,000): approximate; when fewer than ``k`` of its rows pass the filter (the scan gives up
  after ``hnsw.max_scan_tuples``), the exact plan answers instead. No index is built for a
  namespace, however large: nothing runs DDL while serving, and every statement's planner
  weighs the same indexes whatever the number of users.

The namespace is written into the statements as a literal: the planner then prunes to its
partition at plan time. A namespace with sub-namespaces
(none of the agent's own) is searched with ``prefix = 'ns' OR prefix LIKE 'ns.%'``, which
cannot be pruned: exact, over every partition.

``rank_memories`` is recall's ranking (the one place its formula is written): the
``candidates`` most similar memories, then over that bounded set

    score = w_sim · similarity + w_imp · importance + w_rec · recency
    similarity = 1 - cosine distance to the message
    importance = the item's level mapped through ``levels`` (low 0.3, medium 0.6, high 1.0)
    recency    = 0.5 ** (age_days / half_life_days) = exp(-age_days · ln 2 / half_life_days),
                 age since ``last_used``, else ``updated_at`` (never negative)

ordered by score, ties to the older item. memory/recall.py gives the weights (0.6, 0.25,
0.15, half-life 30 days). Items whose importance or timestamps do not parse are skipped,
never an error: one bad item must not break a turn.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, AsyncIterator, Awaitable, Mapping, Sequence

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from storage.partitions import ANN_EF_SEARCH, PARTITIONS, ann_scope, ann_settings, dims_of, hnsw_index, leaf_statements, relkind, through_hnsw, to_partitioned
from storage.vector_literal import vector_literal

log = logging.getLogger(__name__)

MAX_K = 1000
# From this many embedded vectors on (an item has one per indexed field), a namespace is searched
# through its partition's HNSW index (see the docstring).
LARGE_NAMESPACE = 5_000
# Serves both arms of the namespace condition (= and LIKE 'ns.%'); the primary key's
# default collation cannot serve the LIKE.
PREFIX_INDEX = "store_vectors_prefix_idx"

# Timestamps in item values are ISO-8601 JSON strings. One that is not (Postgres alone
# would take 'yesterday' or 'epoch') or does not parse yields NULL, not an error.
# PARALLEL UNSAFE: its exception block opens a subtransaction, which no parallel query may.
SAFE_TIMESTAMPTZ = r"""
CREATE OR REPLACE FUNCTION memory_agent_try_timestamptz(t text) RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL UNSAFE AS $$
BEGIN
    IF t !~ '^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$' THEN
        RETURN NULL;
    END IF;
    RETURN t::timestamptz;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$
"""

# (prefix, key, distance) of the namespace's embedded items: all of them (exact; the function,
# not the operator, so no index serves it), or the nearest ``ann_limit`` through the partition's
# HNSW index, scanned iteratively until that many of the namespace's rows are found.
_SCORED_EXACT = r"""
        SELECT sv.prefix, sv.key, min(cosine_distance(sv.embedding, %(query)s::vector)) AS distance
        FROM store_vectors sv
        WHERE {namespace}
        GROUP BY sv.prefix, sv.key
"""
_SCORED_ANN = r"""
        SELECT near.prefix, near.key, min(near.distance) AS distance
        FROM (
            SELECT sv.prefix, sv.key, sv.embedding <=> %(query)s::vector AS distance
            FROM store_vectors sv
            WHERE {namespace}
            ORDER BY sv.embedding <=> %(query)s::vector
            LIMIT %(ann_limit)s
        ) near
        GROUP BY near.prefix, near.key
"""

# The scored items joined to ``store`` in distance order until ``k`` pass the filter: a
# nested loop that stops early, so about k rows of ``store`` are read, not all of them. (The
# lookup is a LATERAL ... LIMIT 1 so the planner keeps it one: as a plain join it hashed the whole
# store table when that was small, 7 of the 8.6 ms at 9,200 rows.)
_NEAREST = r"""
    WITH scored AS MATERIALIZED ({scored})
    SELECT s.prefix, s.key, s.value, s.created_at, s.updated_at, c.distance,
        (SELECT count(*) FROM scored) AS scanned
    FROM (SELECT prefix, key, distance FROM scored ORDER BY distance, key) c
    CROSS JOIN LATERAL (
        SELECT s.prefix, s.key, s.value, s.created_at, s.updated_at FROM store s
        WHERE s.prefix = c.prefix AND s.key = c.key
          AND s.value @> %(filter)s AND (s.expires_at IS NULL OR s.expires_at > now())
        LIMIT 1
    ) s
    ORDER BY c.distance, c.key
    LIMIT %(k)s
"""

_SEARCH = """
SELECT prefix, key, value, created_at, updated_at, 1 - distance AS similarity, scanned
FROM ({nearest}) nearest
ORDER BY distance, key
"""

# Each timestamp is parsed once per item (MATERIALIZED: inlined, the planner called the parser
# again in the filter and in the sort key, ~6 µs of plpgsql a call; 50 of 200 facts ranked took
# 3.1 ms of the server's time, now 2.3).
_RANK = """
WITH best AS ({nearest}),
parsed AS MATERIALIZED (
    SELECT b.prefix, b.key, b.value, b.created_at, b.updated_at, b.scanned, 1 - b.distance AS similarity,
        (%(levels)s::jsonb ->> CASE WHEN b.value ? 'importance' THEN b.value ->> 'importance' ELSE 'medium' END)::float8
            AS importance,
        memory_agent_try_timestamptz(b.value ->> 'last_used') AS last_used,
        memory_agent_try_timestamptz(b.value ->> 'updated_at') AS value_updated_at,
        memory_agent_try_timestamptz(b.value ->> 'created_at') AS value_created_at
    FROM best b
),
ranked AS (
    -- recency = exp(-age · ln 2 / half-life), age in days since last use (else update), ≥ 0
    SELECT p.*,
        exp(-greatest(0, extract(epoch FROM (%(now)s::timestamptz
            - coalesce(p.last_used, p.value_updated_at, %(now)s::timestamptz)))::float8 / 86400.0)
            * ln(2) / %(half_life)s) AS recency
    FROM parsed p
    WHERE p.importance IS NOT NULL
      -- a timestamp that is present but does not parse makes the item invalid: skip it
      AND (p.value ->> 'last_used' IS NULL OR p.last_used IS NOT NULL)
      AND (p.value ->> 'updated_at' IS NULL OR p.value_updated_at IS NOT NULL)
      AND (p.value ->> 'created_at' IS NULL OR p.value_created_at IS NOT NULL)
)
SELECT prefix, key, value, created_at, updated_at, scanned, similarity, importance, recency,
    %(w_sim)s * similarity + %(w_imp)s * importance + %(w_rec)s * recency AS score
FROM ranked
ORDER BY score DESC, coalesce(value_created_at, %(now)s::timestamptz), key
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class VectorMatch:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    similarity: float  # cosine, 1 = same direction


@dataclass(frozen=True)
class RankedMemory(VectorMatch):
    importance: float  # the level's weight, 0..1
    recency: float  # exp(-age·ln2 / half-life), 0..1
    score: float


@dataclass(frozen=True)
class ScoreWeights:
    """The terms of recall's score (``memory/recall.py`` passes its own)."""

    similarity: float
    importance: float
    recency: float
    half_life_days: float
    importance_levels: Mapping[str, float]


# The store's vectors, hash-partitioned by namespace (``storage/partitions.py``), one HNSW index
# per partition (created on the parent). langgraph creates the plain table; the set-up moves it
# over (empty on a new database). langgraph's own HNSW index went with the plain table.
VECTORS = "store_vectors"
_VECTOR_COLUMNS = ("prefix", "key", "field_name", "embedding", "created_at", "updated_at")
ANN_INDEX = "store_vectors_embedding_hnsw"


def _partitioned_vectors(dims_type: str, partitions: int = PARTITIONS) -> list[str]:
    return [
        f"""CREATE TABLE {VECTORS} (
    prefix text NOT NULL,
    key text NOT NULL,
    field_name text NOT NULL,
    embedding {dims_type},
    created_at timestamptz DEFAULT CURRENT_TIMESTAMP,
    updated_at timestamptz DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key, field_name),
    FOREIGN KEY (prefix, key) REFERENCES store(prefix, key) ON DELETE CASCADE
) PARTITION BY HASH (prefix)""",
        *leaf_statements(VECTORS, partitions),
    ]


async def setup(pool: AsyncConnectionPool) -> list[str]:
    """Idempotent: what the queries here need beyond the store's own schema, and the move of a
    plain ``store_vectors`` (the old layout, or langgraph's fresh one) to the partitioned layout.
    Returns what was done."""
    done: list[str] = []
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SAFE_TIMESTAMPTZ)
        if await relkind(conn, VECTORS) == "r":
            await cur.execute("SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'", (VECTORS,))
            dims_type = (await cur.fetchone())["t"]
            moved = await to_partitioned(conn, VECTORS, _partitioned_vectors(dims_type), _VECTOR_COLUMNS)
            if moved:
                done.append(f"{VECTORS}: {moved} vectors moved to {PARTITIONS} partitions by namespace")
        # A partitioned table takes no CONCURRENTLY; on a new or just-moved table this is quick.
        # On a table of many vectors (the first start after an upgrade) it takes minutes, once,
        # under the set-up's lock: docs/operations.md says to run `memory-agent migrate` first.
        await cur.execute(f"CREATE INDEX IF NOT EXISTS {PREFIX_INDEX} ON {VECTORS} USING btree (prefix text_pattern_ops)")
        await cur.execute("SELECT to_regclass(%s) IS NULL AS missing", (ANN_INDEX,))
        create = hnsw_index(ANN_INDEX, VECTORS, await dims_of(conn, VECTORS) or 0)
        if (await cur.fetchone())["missing"] and create is not None:
            async with conn.transaction():
                # pgvector builds much faster while the graph fits here (~2 kB per 384-d item).
                await cur.execute("SET LOCAL maintenance_work_mem = '256MB'")
                await cur.execute(create)
            await cur.execute(f"SELECT count(*) AS n FROM {VECTORS}")
            if (n := (await cur.fetchone())["n"]):
                done.append(f"{VECTORS}: HNSW index built over {n} vectors, one per partition")
    return done


async def search_memories(
    db: AsyncConnectionPool | AsyncConnection,
    namespace: Sequence[str],
    query: Sequence[float] | Awaitable[Sequence[float]],
    *,
    k: int = 10,
    filter: Mapping[str, Any] | None = None,
) -> list[VectorMatch]:
    """The ``k`` items under ``namespace`` (and its sub-namespaces) nearest to ``query``.

    Only the namespace's items are compared. ``filter`` keeps items whose value contains
    it (``{"status": "active"}``). ``db`` may be a connection inside the caller's
    transaction. Exact below ``LARGE_NAMESPACE`` items, approximate above (module docstring).
    ``query`` may be an awaitable (a coroutine embedding the text): it is awaited only when the
    namespace has vectors, so an empty one costs no embedding.
    """
    try:
        params = _params(namespace, query, k, filter)
        rows = await _nearest(db, namespace, _SEARCH, params, k, query)
    finally:
        _unused(query)
    return [VectorMatch(**_common(r)) for r in rows]


async def rank_memories(
    db: AsyncConnectionPool | AsyncConnection,
    namespace: Sequence[str],
    query: Sequence[float] | Awaitable[Sequence[float]],
    *,
    now: datetime,
    weights: ScoreWeights,
    candidates: int = 50,
    limit: int = 7,
    filter: Mapping[str, Any] | None = None,
) -> list[RankedMemory]:
    """Recall's ranking in one query: the ``candidates`` most similar items, scored, best ``limit``.

    Ties go to the older item (``created_at`` in the value); the formula is the module docstring's.
    ``query`` may be an awaitable, as in :func:`search_memories`.
    """
    try:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        if not now.tzinfo:
            raise ValueError("now must be timezone-aware")
        if weights.half_life_days <= 0:
            raise ValueError("the recency half-life must be positive")
        params = _params(namespace, query, candidates, filter) | {
            "now": now,
            "limit": limit,
            "levels": Jsonb(dict(weights.importance_levels)),
            "half_life": float(weights.half_life_days),
            "w_sim": float(weights.similarity),
            "w_imp": float(weights.importance),
            "w_rec": float(weights.recency),
        }
        # Enough candidates reached the scoring unless fewer than min(candidates, limit) came back.
        rows = await _nearest(db, namespace, _RANK, params, min(candidates, limit), query)
    finally:
        _unused(query)
    return [RankedMemory(**_common(r), importance=r["importance"], recency=r["recency"], score=r["score"]) for r in rows]


# --------------------------------------------------------------------------- plans
async def _nearest(
    db: AsyncConnectionPool | AsyncConnection, namespace: Sequence[str], outer: str, params: dict[str, Any], enough: int,
    query: Sequence[float] | Awaitable[Sequence[float]] = (),
) -> list[dict[str, Any]]:
    """Run ``outer`` through the partition's HNSW index when the namespace is large, else exactly.
    An awaitable ``query`` is awaited only when the namespace has vectors, and not while holding a
    pool's connection (the embedding may queue behind others)."""
    # Sub-namespaces are rare (the agent's own are leaves): without them the statement names
    # the namespace alone, so the planner prunes to its partition (a LIKE cannot be pruned).
    # Its size, counted up to LARGE_NAMESPACE on the prefix btree (index only, one partition).
    wanted = min(ANN_EF_SEARCH, 2 * params["k"])  # twice k: room for the value filter
    async with _connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_SIZE, {"like": params["ns_like"], "ns": params["ns"], "large": LARGE_NAMESPACE, "index": ANN_INDEX, "wanted": wanted})
        size = await cur.fetchone()
        if params["query"] is not None:  # the vector is in hand: the same connection goes on
            return await _scan(conn, cur, outer, params, size, wanted, enough)
    if not size["n"] and not size["below"]:  # nothing to compare: the vector is not made
        return []
    params = params | {"query": vector_literal(await query)}
    async with _connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        return await _scan(conn, cur, outer, params, size, wanted, enough)


async def _scan(
    conn: AsyncConnection, cur, outer: str, params: dict[str, Any], size: dict[str, Any], wanted: int, enough: int
) -> list[dict[str, Any]]:
    below = size["below"]
    condition = _namespace_condition(conn, params["ns"], column="sv.prefix", below=below)
    # (No HNSW index where vectors of over 2,000 dimensions cannot have one: always exact.)
    large = size["n"] >= LARGE_NAMESPACE and through_hnsw(size["n"], size["partition"], wanted)
    if not below and large and size["indexed"]:
        # One round trip: BEGIN, the settings, the query, COMMIT (partitions.ann_scope).
        async with ann_scope(conn):
            for setting in (*ann_settings(), _NO_SORT):
                await cur.execute(setting)
            await cur.execute(_compose(outer, condition, approximate=True), params | {"ann_limit": wanted}, prepare=False)
            rows = await cur.fetchall()
        # Too few rows passed the filter: the exact plan finds the rest.
        if len(rows) >= enough:
            return rows
    # prepare=False: planned for these values every time. A prepared statement may switch
    # to a generic plan, which cannot use the prefix index for the LIKE arm (a 1,000x
    # slower sequential scan, measured).
    await cur.execute(_compose(outer, condition, approximate=False), params, prepare=False)
    return await cur.fetchall()


def _unused(query: object) -> None:
    """Close an embedding's coroutine that a search did not need (or did not reach): no
    "never awaited" warning, nothing started."""
    if inspect.iscoroutine(query) and inspect.getcoroutinestate(query) == inspect.CORO_CREATED:
        query.close()


# Whether it has sub-namespaces; its partition's rows (the statistics' estimate); its vectors,
# counted on the prefix btree (index only) up to what decides ``through_hnsw``: LARGE_NAMESPACE,
# or more where the partition is crowded.
_SIZE = r"""
WITH part AS (
    SELECT greatest(c.reltuples, 0)::float8 AS rows FROM pg_class c
    WHERE c.oid = (SELECT tableoid FROM store_vectors WHERE prefix = %(ns)s LIMIT 1)
)
SELECT EXISTS (SELECT 1 FROM store WHERE prefix LIKE %(like)s ESCAPE '\') AS below,
       coalesce((SELECT rows FROM part), 0) AS partition,
       (SELECT count(*) FROM (
            SELECT 1 FROM store_vectors WHERE prefix = %(ns)s
            LIMIT greatest(%(large)s, ceil(sqrt(%(wanted)s * coalesce((SELECT rows FROM part), 0))) + 1)::bigint
       ) s) AS n,
       to_regclass(%(index)s) IS NOT NULL AS indexed
"""
# Through the index, not a sort: on its partition the planner may cost a sort of a just-large
# namespace's rows as cheaper, which is the exact plan's work without its guarantees.
_NO_SORT = "SET LOCAL enable_sort = off"


def _compose(outer: str, condition: str, *, approximate: bool) -> str:
    scored = (_SCORED_ANN if approximate else _SCORED_EXACT).format(namespace=condition)
    return outer.format(nearest=_NEAREST.format(scored=scored))


def planned_statements(conn: AsyncConnection, namespace: Sequence[str], query: Sequence[float]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The statements (and parameters) a search of ``namespace`` runs, by name, as ``_nearest``
    composes them (for measuring their planning: ``benchmarks/bench_planning.py``)."""
    params = _params(namespace, query, 10, None)
    rank = params | {"now": datetime.now().astimezone(), "limit": 7, "levels": Jsonb({"medium": 0.6}), "half_life": 30.0,
                     "w_sim": 0.6, "w_imp": 0.25, "w_rec": 0.15, "ann_limit": ANN_EF_SEARCH}
    condition = _namespace_condition(conn, params["ns"], column="sv.prefix", below=False)
    return {
        "store rank, HNSW": (_compose(_RANK, condition, approximate=True), rank),
        "store rank, exact": (_compose(_RANK, condition, approximate=False), rank),
        "store search, exact": (_compose(_SEARCH, condition, approximate=False), params),
    }


def _namespace_condition(conn: AsyncConnection, path: str, *, column: str, below: bool) -> str:
    """``col = 'ns'``, or with ``below`` ``(col = 'ns' OR col LIKE 'ns.%' ESCAPE '\\')``: the
    namespace written in, quoted (a literal: pruned at plan time), '%' doubled for a statement
    with parameters."""
    exact = sql.Literal(path).as_string(conn)
    if not below:
        return f"{column} = {exact}".replace("%", "%%")
    under = sql.Literal(_escape_like(path) + ".%").as_string(conn)
    return f"({column} = {exact} OR {column} LIKE {under} ESCAPE '\\')".replace("%", "%%")


# --------------------------------------------------------------------------- helpers
def _path(namespace: Sequence[str]) -> str:
    if not namespace or any(not isinstance(part, str) or not part or "." in part for part in namespace):
        raise ValueError(f"invalid namespace {tuple(namespace)!r}: its parts must be non-empty strings, without '.'")
    return ".".join(namespace)


def _params(namespace: Sequence[str], query: Sequence[float] | Awaitable[Sequence[float]], k: int, filter: Mapping[str, Any] | None) -> dict[str, Any]:
    path = _path(namespace)
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, not {k}")
    return {
        "query": None if inspect.isawaitable(query) else vector_literal(query),
        "ns": path,
        "ns_like": _escape_like(path) + ".%",
        "filter": Jsonb(dict(filter or {})),
        "k": k,
    }


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _common(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "namespace": tuple(row["prefix"].split(".")),
        "key": row["key"],
        "value": row["value"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "similarity": float(row["similarity"]),
    }


@asynccontextmanager
async def _connection(db: AsyncConnectionPool | AsyncConnection) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnectionPool):
        async with db.connection() as conn:
            yield conn
    else:
        yield db
