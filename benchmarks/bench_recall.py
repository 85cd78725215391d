"""Vector search at scale: one user's top-k among every user's memories (not a pytest test).

    python -m benchmarks.bench_recall [--memories 1000000] [--users 1000] [--heavy 0]
                                      [--db-dir DIR] [--queries 200] [--k 10]
                                      [--ef-search 40,200,1000] [--skip-asearch] [--seed-only]

Seeds an embedded Postgres (the production schema: langgraph's ``store`` and
``store_vectors`` with its shared HNSW index, plus ``storage.vector_search.setup``) with
synthetic 384-d memories in the facts namespaces of ``--users`` users, and with
``--heavy N`` one more user holding N memories, then measures, over ``--queries``
queries spread across the users (and up to 100 of the heavy user):

- ``storage.vector_search.search_memories`` (the plan we use): recall@k against an exact
  search, p50/p95 latency, and how many queries got fewer than k rows;
- ``rank_memories`` (recall's ranking in SQL): latency only;
- the same question through the shared HNSW index, filtered afterwards to the user's
  namespace, at each ``--ef-search`` (what pgvector 0.6.2, without iterative index scans,
  offers);
- ``AsyncPostgresStore.asearch`` (what recall used before).

The data are clustered, not uniform noise: 256 shared topics with 16 subtopics each
(popular topics are shared by many users), every user writing about 12 of them with a
personal slant; 5 % of the memories are superseded and filtered out. A query is a new
point in one of the user's subtopics. The exact answer is computed in numpy from the
same generator, so it does not depend on Postgres.

Seeding 1,000,000 memories (binary COPY, then one HNSW build) takes ~15 minutes on 2
cores; the heavy user is added afterwards with the shared index in place (row-by-row
HNSW inserts, as a growing user's writes are: slow). The
database in ``--db-dir`` is kept and reused by later runs with the same sizes. Rows of
different users are interleaved on disk, as they are when users write at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

DIMS = 384
TOPICS, SUBTOPICS, TOPICS_PER_USER = 256, 16, 12
HNSW_INDEX = "store_vectors_embedding_idx"
BLOCK_USERS = 100  # users generated together, their rows shuffled before COPY
IMPORTANCE = ("low", "medium", "high")
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class UserRows:
    keys: list[str]
    vectors: np.ndarray  # (n, DIMS) float32, unit norm
    values: list[dict]

    @property
    def active(self) -> np.ndarray:
        return np.array([v["status"] == "active" for v in self.values])


class Corpus:
    """Deterministic synthetic memories: any user's rows can be regenerated on their own."""

    def __init__(self, memories: int, users: int, heavy: int = 0, seed: int = 7) -> None:
        # ``heavy``: one more user (number ``users``) with that many memories.
        self.memories, self.users, self.heavy, self.seed = memories, users, heavy, seed
        rng = np.random.default_rng(seed)
        self.topics = _unit(rng.standard_normal((TOPICS, DIMS)))
        self.subtopics = _unit(rng.standard_normal((TOPICS, SUBTOPICS, DIMS)))
        popularity = 1.0 / np.arange(1, TOPICS + 1) ** 0.8
        self.popularity = popularity / popularity.sum()

    @staticmethod
    def user_id(u: int) -> str:
        return f"bench{u:05d}"

    def namespace(self, u: int) -> tuple[str, ...]:
        return ("users", self.user_id(u), "facts")

    def count(self, u: int) -> int:
        if u == self.users:
            return self.heavy
        base, extra = divmod(self.memories, self.users)
        return base + (1 if u < extra else 0)

    def _user_rng(self, u: int, stream: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, u, stream])

    def _user_topics(self, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(TOPICS, size=TOPICS_PER_USER, replace=False, p=self.popularity)

    def _point(self, rng: np.random.Generator, topic: np.ndarray, sub: np.ndarray, slant: np.ndarray | float) -> np.ndarray:
        noise = rng.standard_normal((len(topic), DIMS)) * (0.8 / np.sqrt(DIMS))
        return _unit(self.topics[topic] + 0.7 * self.subtopics[topic, sub] + 0.35 * slant + noise)

    def rows(self, u: int) -> UserRows:
        rng = self._user_rng(u, 0)
        n = self.count(u)
        mine = self._user_topics(rng)
        slant = _unit(rng.standard_normal(DIMS))
        topic = mine[rng.integers(0, TOPICS_PER_USER, n)]
        sub = rng.integers(0, SUBTOPICS, n)
        vectors = self._point(rng, topic, sub, slant)
        created = rng.uniform(0, 300, n)
        updated = created + rng.exponential(10, n)
        used = rng.random(n) < 0.3
        used_at = updated + rng.exponential(5, n)
        importance = rng.integers(0, 3, n)
        superseded = rng.random(n) < 0.05
        keys = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)]
        values = [
            {
                "id": keys[i],
                "text": f"memory {i} of {self.user_id(u)} about topic {topic[i]}.{sub[i]}",
                "importance": IMPORTANCE[importance[i]],
                "tags": [],
                "hash": "",
                "created_at": (EPOCH + timedelta(days=float(created[i]))).isoformat(),
                "updated_at": (EPOCH + timedelta(days=float(updated[i]))).isoformat(),
                "last_used": (EPOCH + timedelta(days=float(used_at[i]))).isoformat() if used[i] else None,
                "source_thread": None,
                "source_message_id": None,
                "superseded_by": None,
                "valid_to": None,
                "status": "superseded" if superseded[i] else "active",
                "mentions": 1,
            }
            for i in range(n)
        ]
        return UserRows(keys, vectors, values)

    def query(self, u: int, i: int) -> np.ndarray:
        """A new point in one of the user's subtopics (no personal slant: the question is new)."""
        rng = self._user_rng(u, 1 + i)
        mine = self._user_topics(self._user_rng(u, 0))
        topic = np.array([mine[rng.integers(0, TOPICS_PER_USER)]])
        return self._point(rng, topic, rng.integers(0, SUBTOPICS, 1), 0.0)[0]


# --------------------------------------------------------------------------- seeding
SEED_TABLE = "CREATE TABLE IF NOT EXISTS bench_recall_seed (id int PRIMARY KEY, memories bigint, users int, seed int, done_at timestamptz)"


async def seeded(conn, corpus: Corpus, part: int, memories: int) -> bool:
    """Whether ``part`` (1: the users, 2: the heavy user) is in the database already."""
    await conn.execute(SEED_TABLE)
    row = await (await conn.execute("SELECT memories, users, seed FROM bench_recall_seed WHERE id = %s", (part,))).fetchone()
    if row is None:
        return False
    if (row["memories"], row["users"], row["seed"]) != (memories, corpus.users, corpus.seed):
        sys.exit(f"the database holds another data set ({dict(row)}); use another --db-dir")
    return True


def items(corpus: Corpus, users: range) -> list:
    """The users' memories as store items, shuffled as concurrent writers would leave them."""
    from storage.bulk_load import BulkItem

    out = []
    for u in users:
        r = corpus.rows(u)
        out += [
            BulkItem(
                corpus.namespace(u),
                r.keys[i],
                r.values[i],
                r.vectors[i],
                created_at=datetime.fromisoformat(r.values[i]["created_at"]),
                updated_at=datetime.fromisoformat(r.values[i]["updated_at"]),
            )
            for i in range(len(r.keys))
        ]
    order = np.random.default_rng([corpus.seed, 99, users.start]).permutation(len(out))
    return [out[j] for j in order]


async def seed(conn, corpus: Corpus) -> None:
    """COPY every user's memories, interleaved, then (re)build the HNSW index once."""
    from storage.bulk_load import copy_items

    # The production schema keeps no index over everyone's vectors (docs/scaling.md); the
    # comparison arm below builds the one langgraph would (on every partition of store_vectors).
    log("emptying store tables and dropping the shared HNSW index, if any, for a bulk load")
    await conn.execute("TRUNCATE store CASCADE")
    await conn.execute("DELETE FROM bench_recall_seed")
    await conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
    started = time.perf_counter()
    done = 0
    for first in range(0, corpus.users, BLOCK_USERS):
        done += await copy_items(conn, items(corpus, range(first, min(corpus.users, first + BLOCK_USERS))))
        rate = done / (time.perf_counter() - started)
        log(f"copied {done:,}/{corpus.memories:,} memories ({rate:,.0f}/s, {(corpus.memories - done) / rate:,.0f} s left)")
    log("building the shared HNSW index (m=16, ef_construction=64, as langgraph creates it); this is the long part")
    started = time.perf_counter()
    await conn.execute("SET maintenance_work_mem = '4GB'")
    await conn.execute(f"CREATE INDEX {HNSW_INDEX} ON store_vectors USING hnsw (embedding vector_cosine_ops) WITH (m=16, ef_construction=64)")
    await conn.execute("RESET maintenance_work_mem")
    log(f"HNSW index built in {time.perf_counter() - started:,.0f} s")
    log("VACUUM ANALYZE")
    await conn.execute("VACUUM ANALYZE store")
    await conn.execute("VACUUM ANALYZE store_vectors")
    await conn.execute("INSERT INTO bench_recall_seed VALUES (1, %s, %s, %s, now())", (corpus.memories, corpus.users, corpus.seed))


async def seed_heavy(conn, corpus: Corpus) -> None:
    """Add the heavy user to the seeded table, as it would grow: the shared HNSW index is kept."""
    from storage.bulk_load import copy_items

    log(f"adding one user with {corpus.heavy:,} memories (the shared HNSW index takes them one by one: minutes)")
    started = time.perf_counter()
    block = items(corpus, range(corpus.users, corpus.users + 1))
    for first in range(0, len(block), 10_000):
        await copy_items(conn, block[first : first + 10_000])
        log(f"copied {min(len(block), first + 10_000):,}/{len(block):,} ({time.perf_counter() - started:,.0f} s)")
    await conn.execute("VACUUM ANALYZE store")
    await conn.execute("VACUUM ANALYZE store_vectors")
    await conn.execute("INSERT INTO bench_recall_seed VALUES (2, %s, %s, %s, now())", (corpus.heavy, corpus.users, corpus.seed))


async def prepare(url: str, corpus: Corpus) -> None:
    from memory.backend import open_memory
    from embeddings import resolve_embeddings

    # The production schema (langgraph's store tables + HNSW index, storage.vector_search's
    # set-up). The embedding model is only named: the benchmark never embeds text.
    async with open_memory(url, resolve_embeddings("local:all-MiniLM-L6-v2")) as backend:
        async with backend.pool.connection() as conn:
            if not await seeded(conn, corpus, 1, corpus.memories):
                await seed(conn, corpus)
            if corpus.heavy and not await seeded(conn, corpus, 2, corpus.heavy):
                await seed_heavy(conn, corpus)


# --------------------------------------------------------------------------- measuring
def exact_top_k(rows: UserRows, query: np.ndarray, k: int) -> list[str]:
    sims = rows.vectors @ query
    sims[~rows.active] = -np.inf
    best = np.argsort(-sims, kind="stable")[:k]
    return [rows.keys[i] for i in best if np.isfinite(sims[i])]


def vector_text(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.8g}" for x in v) + "]"


HNSW_FILTERED = """
SELECT c.key FROM (
    SELECT sv.prefix, sv.key, sv.embedding <=> %(q)s::vector AS distance
    FROM store_vectors sv
    ORDER BY sv.embedding <=> %(q)s::vector
    LIMIT %(ef)s
) c
JOIN store s ON s.prefix = c.prefix AND s.key = c.key
WHERE c.prefix = %(ns)s AND s.value @> '{"status": "active"}'
ORDER BY c.distance
LIMIT %(k)s
"""


@dataclass
class Result:
    group: str
    name: str
    recall: float
    p50: float
    p95: float
    short: int  # queries that got fewer than k rows back

    def line(self) -> str:
        return f"{self.group:<18}{self.name:<32}{self.recall:>10.3f}{self.p50:>10.1f}{self.p95:>10.1f}{self.short:>8}"


def make_cases(corpus: Corpus, users: list[int], k: int) -> list[tuple[int, np.ndarray, list[str]]]:
    cases, cache = [], {}
    for i, u in enumerate(users):
        rows = cache.get(u) or cache.setdefault(u, corpus.rows(u))
        q = corpus.query(u, i)
        cases.append((u, q, exact_top_k(rows, q, k)))
    return cases


async def measure(
    url: str, corpus: Corpus, queries: int, k: int, ef_values: list[int], skip_asearch: bool
) -> list[Result]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from core.namespaces import INDEXED_FIELDS
    from memory import recall
    from storage.postgres import open_pool
    from storage import vector_search

    rng = np.random.default_rng([corpus.seed, 12345])
    groups = {f"{corpus.count(0):,} memories": make_cases(corpus, [int(u) for u in rng.integers(0, corpus.users, queries)], k)}
    log(f"{queries} queries over {len({c[0] for c in groups[next(iter(groups))]})} users; exact answers computed in numpy")
    if corpus.heavy:
        groups[f"{corpus.heavy:,} memories"] = make_cases(corpus, [corpus.users] * min(queries, 100), k)
        log("and queries of the heavy user")

    pool = await open_pool(url, max_size=2)
    results: list[Result] = []

    async def run(group: str, cases, name: str, search) -> None:
        for u, q, _ in cases[:20]:  # warm-up: connections, plans, hot index pages
            await search(u, q)
        hits, times, short = [], [], 0
        for u, q, truth in cases:
            start = time.perf_counter()
            got = await search(u, q)
            times.append((time.perf_counter() - start) * 1000)
            short += len(got) < len(truth)
            hits.append(len(set(got) & set(truth)) / max(1, len(truth)))
        results.append(Result(group, name, statistics.mean(hits), statistics.median(times), pct(times, 0.95), short))
        log(results[-1].line())

    async def ours(u, q):
        found = await vector_search.search_memories(pool, corpus.namespace(u), q, k=k, filter={"status": "active"})
        return [m.key for m in found]

    async def ranked(u, q):
        found = await vector_search.rank_memories(
            pool, corpus.namespace(u), q, now=datetime.now(timezone.utc), weights=recall.WEIGHTS, limit=k, filter={"status": "active"}
        )
        return [m.key for m in found]

    def hnsw_filtered(ef: int):
        async def search(u, q):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                cur = await conn.execute(HNSW_FILTERED, {"q": vector_text(q), "ef": ef, "ns": ".".join(corpus.namespace(u)), "k": k})
                return [r["key"] for r in await cur.fetchall()]

        return search

    try:
        for group, cases in groups.items():
            await run(group, cases, "search_memories (ours)", ours)
            # The ranking's answer is not the similarity top-k: its recall column means nothing.
            await run(group, cases, "rank_memories (ours, latency)", ranked)
            for ef in ef_values:
                await run(group, cases, f"HNSW + filter, ef_search={ef}", hnsw_filtered(ef))
            if not skip_asearch:
                # What recall used before: the store's own search (embedding looked up, not computed).
                by_text = {f"q{i}": q for i, (_, q, _) in enumerate(cases)}
                text_of = {id(q): t for t, q in by_text.items()}
                store = AsyncPostgresStore(
                    conn=pool,
                    index={"dims": DIMS, "embed": lambda texts: [by_text[t].tolist() for t in texts], "fields": INDEXED_FIELDS},
                )

                async def asearch(u, q, store=store, text_of=text_of):
                    hits = await store.asearch(corpus.namespace(u), query=text_of[id(q)], filter={"status": "active"}, limit=k)
                    return [h.key for h in hits]

                await run(group, cases, "store.asearch (before)", asearch)
    finally:
        await pool.close()
    return results


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--db-dir", type=Path, help="kept between runs (default /tmp/ma-recall-<memories>-<users>)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ef-search", default="40,200,1000", help="HNSW + filter settings to compare ('' for none)")
    parser.add_argument("--skip-asearch", action="store_true", help="do not measure AsyncPostgresStore.asearch")
    parser.add_argument("--heavy", type=int, default=0, help="add one user with this many memories and measure it too")
    parser.add_argument("--seed-only", action="store_true", help="seed the database and stop")
    args = parser.parse_args()
    if args.users < 1 or args.memories < args.users:
        parser.error("need at least one memory per user")

    from storage.postgres import start_embedded_postgres

    corpus = Corpus(args.memories, args.users, heavy=args.heavy)
    directory = (args.db_dir or Path(f"/tmp/ma-recall-{args.memories}-{args.users}")).resolve()
    log(f"database in {directory} (kept for later runs)")
    url = start_embedded_postgres(directory)
    asyncio.run(prepare(url, corpus))
    if args.seed_only:
        return
    ef_values = [int(x) for x in args.ef_search.split(",") if x.strip()]
    results = asyncio.run(measure(url, corpus, args.queries, args.k, ef_values, args.skip_asearch))

    print(f"machine: {machine()}")
    heavy = f" + one user with {args.heavy:,}" if args.heavy else ""
    print(f"memories: {args.memories:,} across {args.users:,} users{heavy} ({DIMS} dims), queries: {args.queries}, k: {args.k}")
    print(f"{'user has':<18}{'plan':<32}{'recall@' + str(args.k):>10}{'p50 ms':>10}{'p95 ms':>10}{'short':>8}")
    for r in results:
        print(r.line())


if __name__ == "__main__":
    main()
