"""Planning time of every search statement as the number of large users grows (not a pytest test).

    python -m benchmarks.bench_planning [--sizes 0,100,500,1000,2000,3000] [--rows 3] [--json PATH]

Three layouts side by side, on a throwaway embedded Postgres, with the search statements the code
runs (``storage.episodes.search_statements``, ``storage.vector_search.planned_statements``):

- ``plain``: the first layout. One table each for the episodic index and the store's vectors,
  and every large user's own partial indexes on it (episodes: HNSW + GIN ``WHERE owner = '…'``;
  store: HNSW ``WHERE prefix = '…'``).
- ``own``: the second. Both tables hash-partitioned into ``PARTITIONS`` by owner (namespace), a
  large user's own indexes on their partition.
- ``shared``: today's (``storage/partitions.py``). Partitioned the same way, one HNSW (and, for
  the episodes, one GIN) index per partition for everyone, scanned iteratively (pgvector 0.8);
  no user has an index of their own.

Each large user gets ``--rows`` rows in each table (planning does not depend on the rows, only on
the indexes the planner has to weigh; real sizes are for ``bench_turn``), so thousands of large
users fit on 2 cores. The indexes are built plainly (not CONCURRENTLY) to load faster; they are
the same indexes. For each size, the median of 7 ``EXPLAIN (SUMMARY)`` planning times is printed,
for a large user and for a small one (who has no index of their own but used to pay the same).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

DIMS = 384
REPEAT = 7


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def unit(seed: int) -> list[float]:
    import numpy as np

    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return (v / np.linalg.norm(v)).tolist()


async def create_layout(conn, layout: str) -> None:
    from storage import episodes, vector_search

    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await conn.execute(
        "CREATE TABLE store (prefix text NOT NULL, key text NOT NULL, value jsonb NOT NULL, created_at timestamptz DEFAULT now(), "
        "updated_at timestamptz DEFAULT now(), expires_at timestamptz, ttl_minutes int, PRIMARY KEY (prefix, key))"
    )
    await conn.execute("CREATE INDEX store_prefix_idx ON store USING btree (prefix text_pattern_ops)")
    await conn.execute(vector_search.SAFE_TIMESTAMPTZ)
    partitions = 0 if layout == "plain" else vector_search.PARTITIONS
    for statement in episodes.create_statements(DIMS, partitions=partitions):
        if layout == "shared" or ("USING hnsw" not in statement and "USING gin" not in statement):
            await conn.execute(statement)
    vectors = vector_search._partitioned_vectors(f"vector({DIMS})", partitions)
    if not partitions:
        vectors = [vectors[0].replace(" PARTITION BY HASH (prefix)", "")]
    for statement in vectors:
        await conn.execute(statement)
    await conn.execute(f"CREATE INDEX {vector_search.PREFIX_INDEX} ON store_vectors USING btree (prefix text_pattern_ops)")
    if layout == "shared":
        await conn.execute(f"CREATE INDEX {vector_search.ANN_INDEX} ON store_vectors USING hnsw (embedding vector_cosine_ops)")


def own_index(prefix: str, owner: str) -> str:
    """How the older layouts named a large user's own index."""
    import hashlib

    return prefix + hashlib.sha256(owner.encode()).hexdigest()[:24]


async def add_users(conn, layout: str, first: int, last: int, rows: int) -> None:
    """Large users ``first .. last - 1``: their rows and, in the older layouts, their own indexes."""
    from psycopg import sql

    from storage import episodes
    from storage.partitions import leaf_of

    now = datetime.now(timezone.utc)
    for n in range(first, last):
        owner = f"user{n:05d}"
        ns = ("users", owner, "facts")
        path = ".".join(ns)
        vec = str(unit(n))
        async with conn.transaction():
            for r in range(rows):
                await conn.execute(
                    f"INSERT INTO {episodes.TABLE} (owner, thread_id, message_id, position, role, sent_at, content, embedding) "
                    "VALUES (%s, 't', %s, %s, 'user', %s, 'I keep bees on the roof', %s::vector)",
                    (owner, f"m{r}", r, now, vec),
                )
                await conn.execute("INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s)", (path, f"k{r}", json.dumps({"text": "bees"})))
                await conn.execute(
                    "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (%s, %s, 'text', %s::vector)", (path, f"k{r}", vec)
                )
            await conn.execute(f"INSERT INTO {episodes.COUNTS} (owner, messages) VALUES (%s, %s)", (owner, rows))
            if layout == "shared":
                continue
            on_episodes = sql.SQL(episodes.TABLE if layout == "plain" else await leaf_of(conn, episodes.TABLE, "owner", owner))
            on_vectors = sql.SQL("store_vectors" if layout == "plain" else await leaf_of(conn, "store_vectors", "prefix", path))
            hnsw, gin = own_index(f"{episodes.TABLE}_hnsw_", owner), own_index(f"{episodes.TABLE}_gin_", owner)
            owner_is = sql.SQL("owner = {}").format(sql.Literal(owner))
            await conn.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops) WHERE {}").format(sql.Identifier(hnsw), on_episodes, owner_is))
            await conn.execute(sql.SQL("CREATE INDEX {} ON {} USING gin (tsv) WHERE {}").format(sql.Identifier(gin), on_episodes, owner_is))
            await conn.execute(
                sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops) WHERE prefix = {}").format(
                    sql.Identifier(own_index("store_vectors_ns_", path)), on_vectors, sql.Literal(path)
                )
            )


async def planning(conn, owner: str, *, large: bool = True) -> dict[str, float]:
    """Median planning ms of each search statement of ``owner`` (``large``: the shapes a large
    owner's search runs)."""
    from storage import episodes, vector_search

    vec = str(unit(1))
    words, rows = episodes.search_statements(conn, owner, large=large)
    base = {"q": "bees on the roof", "stop": [], "k": 40, "per_word": episodes.PER_WORD, "common_sample": episodes.COMMON_SAMPLE, "common_share": None, "common_min": 1, "since": None, "until": None, "thread": "", "exclude": []}
    statements = {
        "episodes words": (words, base),
        "episodes rows": (rows, base | {"vector": vec, "similar_to": vec, "lexemes": ["bee", "roof"], "weights": [1.0, 1.0],
                                         "text_threads": ["t"], "text_messages": ["m0"], "text_ranks": [1]}),
    }
    statements |= vector_search.planned_statements(conn, ("users", owner, "facts"), unit(1))
    out = {}
    for name, (statement, params) in statements.items():
        times = []
        for _ in range(REPEAT):
            cur = await conn.execute(sql_explain(statement), params, prepare=False)
            plan = (await cur.fetchone())["QUERY PLAN"][0]
            times.append(plan["Planning Time"])
        out[name] = round(statistics.median(times), 3)
    return out


def sql_explain(statement):
    from psycopg import sql

    return sql.SQL("EXPLAIN (SUMMARY, FORMAT JSON) ") + (statement if isinstance(statement, sql.Composable) else sql.SQL(statement))


async def run(sizes: list[int], rows: int, layouts: list[str]) -> dict:
    import pgserver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    directory = tempfile.mkdtemp(prefix="ma-plan-")
    server = pgserver.get_server(directory, cleanup_mode="delete")
    results: dict = {"sizes": sizes, "rows_per_user": rows, "loadavg": os.getloadavg()}
    try:
        for layout in layouts:
            server.psql(f"CREATE DATABASE plan_{layout}")
            url = server.get_uri(f"plan_{layout}")
            async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
                await create_layout(conn, layout)
                # a small user: a few rows, no index of their own
                await conn.execute(
                    "INSERT INTO memory_agent_episodes (owner, thread_id, message_id, position, role, sent_at, content, embedding) "
                    "VALUES ('small', 't', 'm0', 0, 'user', now(), 'bees', %s::vector)", (str(unit(0)),)
                )
                done = 0
                results[layout] = {}
                for size in sizes:
                    started = time.perf_counter()
                    await add_users(conn, layout, done, size, rows)
                    done = size
                    await conn.execute("ANALYZE")
                    large = await planning(conn, "user00000" if size else "small", large=bool(size))
                    small = await planning(conn, "small", large=False)
                    results[layout][size] = {"large user": large, "small user": small}
                    note(f"{layout}: {size:,} large users (added in {time.perf_counter() - started:.0f} s): "
                         + ", ".join(f"{k} {v:.2f}" for k, v in large.items()) + " ms")
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100,500,1000,2000,3000", help="numbers of large users, ascending")
    parser.add_argument("--rows", type=int, default=3, help="rows of each large user in each table")
    parser.add_argument("--layouts", default="plain,own,shared")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes) or min(sizes) < 0 or args.rows < 1:
        parser.error("sizes must ascend from 0 or more; rows at least 1")
    results = asyncio.run(run(sizes, args.rows, args.layouts.split(",")))
    print(f"load average at the start: {results['loadavg']}; planning ms, median of {REPEAT}, large user / small user")
    for layout in args.layouts.split(","):
        names = list(results[layout][sizes[0]]["large user"])
        print(f"\n{layout}:\n{'large users':>12} " + " ".join(f"{n:>26}" for n in names))
        for size in sizes:
            r = results[layout][size]
            print(f"{size:>12,} " + " ".join(f"{r['large user'][n]:>12.2f} / {r['small user'][n]:>11.2f}" for n in names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
