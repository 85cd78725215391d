"""storage.vector_search on the real embedded Postgres + pgvector 0.8, with many users in one table.

The many-users database puts every user's memories on the same shared topics, so the
nearest rows of the whole table are mostly other users': the case where an HNSW scan
filtered afterwards returns too few rows. Exact answers are computed in numpy.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg
import pytest
from psycopg.rows import dict_row

from memory.backend import open_memory
from core.namespaces import facts_ns, tasks_ns
from memory.recall import WEIGHTS
from core.schemas import Fact
from memory.user_memory import search_facts
from storage.bulk_load import BulkItem, copy_items
from storage import vector_search
from storage.vector_search import rank_memories, search_memories

DIMS = 384
USERS, PER_USER, TOPICS = 200, 30, 6
BIG = 400
NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def fact_value(key: str, *, importance: str = "medium", status: str = "active", updated: datetime = NOW, last_used=None, created=None) -> dict:
    created = created or updated
    return Fact(
        id=key, text=f"fact {key}", importance=importance, status=status, created_at=created, updated_at=updated, last_used=last_used
    ).model_dump(mode="json")


async def write(pool, items: list[BulkItem]) -> None:
    async with pool.connection() as conn:
        await copy_items(conn, items)


class ManyUsers:
    """USERS users × PER_USER memories on TOPICS shared topics; 10 % superseded."""

    def __init__(self) -> None:
        rng = np.random.default_rng(5)
        self.topics = unit(rng.standard_normal((TOPICS, DIMS)))
        self.rows: dict[str, list[tuple[str, np.ndarray, bool]]] = {}
        for u in range(USERS):
            user = f"many{u:03d}"
            topic = rng.integers(0, TOPICS, PER_USER)
            vectors = unit(self.topics[topic] + rng.standard_normal((PER_USER, DIMS)) * (1.0 / math.sqrt(DIMS)))
            active = rng.random(PER_USER) >= 0.1
            self.rows[user] = [(uuid.uuid4().hex, vectors[i], bool(active[i])) for i in range(PER_USER)]
        # Users large enough to be searched through the partition's HNSW index (the tests lower the threshold).
        for user in ("big", "grow"):
            vectors = unit(self.topics[rng.integers(0, TOPICS, BIG)] + rng.standard_normal((BIG, DIMS)) * (1.0 / math.sqrt(DIMS)))
            active = rng.random(BIG) >= 0.1
            self.rows[user] = [(uuid.uuid4().hex, vectors[i], bool(active[i])) for i in range(BIG)]
        # Active only where no query of topic 0 looks: opposite to it.
        near = unit(self.topics[0] + rng.standard_normal((BIG, DIMS)) * (1.0 / math.sqrt(DIMS)))
        far = unit(-self.topics[0] + rng.standard_normal((4, DIMS)) * (1.0 / math.sqrt(DIMS)))
        self.rows["sparse"] = [(uuid.uuid4().hex, v, False) for v in near[:-4]] + [(uuid.uuid4().hex, v, True) for v in far]
        self.rng = rng

    def items(self) -> list[BulkItem]:
        return [
            BulkItem(facts_ns(user), key, fact_value(key, status="active" if active else "superseded"), vector)
            for user, rows in self.rows.items()
            for key, vector, active in rows
        ]

    def query(self) -> np.ndarray:
        return unit(self.topics[0] + self.rng.standard_normal(DIMS) * (1.0 / math.sqrt(DIMS)))

    def exact(self, user: str, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        scored = sorted(((float(v @ query), key) for key, v, active in self.rows[user] if active), reverse=True)
        return [(key, sim) for sim, key in scored[:k]]


@pytest.fixture(scope="module")
async def many_users(new_database, minilm):
    async with open_memory(new_database("vs"), minilm) as backend:
        data = ManyUsers()
        async with backend.pool.connection() as conn:
            await copy_items(conn, data.items())  # no index over everyone's vectors to keep up
            await conn.execute("ANALYZE store")
            await conn.execute("ANALYZE store_vectors")
        yield backend, data


def expected_score(similarity: float, fact: Fact, now) -> float:
    """The ranking formula of storage/vector_search.py's docstring, computed by hand as the test's oracle."""
    when = fact.last_used or fact.updated_at
    age = max(0.0, (now - when).total_seconds() / 86400)
    recency = math.exp(-age * math.log(2) / WEIGHTS.half_life_days)
    return WEIGHTS.similarity * similarity + WEIGHTS.importance * WEIGHTS.importance_levels[fact.importance] + WEIGHTS.recency * recency


@pytest.mark.slow
async def test_one_users_search_returns_exactly_their_rows_and_equals_the_exact_search(many_users):
    backend, data = many_users
    for user in ("many000", "many137", "many199"):
        query = data.query()
        found = await search_memories(backend.pool, facts_ns(user), query, k=10, filter={"status": "active"})
        assert {m.namespace for m in found} == {facts_ns(user)}
        expected = data.exact(user, query, 10)
        assert [m.key for m in found] == [key for key, _ in expected]
        assert [m.similarity for m in found] == pytest.approx([sim for _, sim in expected], abs=1e-5)
        assert all(m.value["status"] == "active" for m in found)


@pytest.mark.slow
async def test_the_many_users_table_is_one_where_a_filtered_hnsw_scan_falls_short(many_users):
    """The premise of the test above, and why the HNSW scans are iterative: without, the shared
    index's 40 nearest rows hold fewer than 10 of one user's."""
    backend, data = many_users
    async with await psycopg.AsyncConnection.connect(backend.url, row_factory=dict_row) as conn, conn.transaction(force_rollback=True):
        await conn.execute("SET LOCAL hnsw.iterative_scan = off")
        await conn.execute("SET LOCAL enable_seqscan = off")  # the HNSW index, not a sort of the table
        plan = await (
            await conn.execute("EXPLAIN SELECT key FROM store_vectors ORDER BY embedding <=> %s::vector LIMIT 40", (str(data.query().tolist()),))
        ).fetchall()
        assert "Index Scan using store_vectors_p" in " ".join(r["QUERY PLAN"] for r in plan)
        rows = await (
            await conn.execute(
                "SELECT c.key FROM (SELECT prefix, key FROM store_vectors ORDER BY embedding <=> %s::vector LIMIT 40) c WHERE c.prefix = %s",
                (str(data.query().tolist()), ".".join(facts_ns("many137"))),
            )
        ).fetchall()
    assert len(rows) < 10


async def partition_ann_index(pool, namespace) -> str:
    """The name of the shared HNSW index on the partition holding ``namespace``."""
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_index x ON x.indexrelid = c.oid "
                "WHERE i.inhparent = %s::regclass AND x.indrelid = (SELECT tableoid FROM store_vectors WHERE prefix = %s LIMIT 1)",
                (vector_search.ANN_INDEX, ".".join(namespace)),
            )
        ).fetchone()
    return row["relname"]


async def index_scans(pool, name: str) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s", (name,))).fetchone()
    return row["idx_scan"] if row else 0


async def store_indexes(pool) -> list[str]:
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'store_vectors%%' ORDER BY 1")).fetchall()
    return [r["indexname"] + " " + r["indexdef"] for r in rows]


@pytest.mark.slow  # seeds many users (~12 s with its teardown): `make test-fast` leaves it out
async def test_a_large_namespace_is_searched_through_its_partitions_hnsw_index_iteratively_and_gets_no_index_of_its_own(many_users, monkeypatch):
    backend, data = many_users
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", BIG)
    indexes_before = await store_indexes(backend.pool)
    name = await partition_ann_index(backend.pool, facts_ns("big"))
    shared_before = await index_scans(backend.pool, name)

    # Searched on a connection of its own, closed afterwards: a backend flushes its
    # index-scan counts when it exits (otherwise up to 10 s later). Prepared from the first
    # use as the pool's are, and past 5 runs: when Postgres may switch to a generic plan.
    searches = 8
    async with await psycopg.AsyncConnection.connect(backend.url, autocommit=True, prepare_threshold=0) as conn:
        for _ in range(searches):
            query = data.query()
            found = await search_memories(conn, facts_ns("big"), query, k=10, filter={"status": "active"})
            assert {m.namespace for m in found} == {facts_ns("big")}
            assert all(m.value["status"] == "active" for m in found)
            expected = [key for key, _ in data.exact("big", query, 10)]
            assert len(set(m.key for m in found) & set(expected)) >= 9  # approximate, but on 400 items all but exact

    for _ in range(100):
        if await index_scans(backend.pool, name) >= shared_before + searches:
            break
        await asyncio.sleep(0.1)
    assert await index_scans(backend.pool, name) == shared_before + searches
    assert await store_indexes(backend.pool) == indexes_before  # nothing was built for the namespace
    assert not any("big" in index for index in indexes_before)


@pytest.mark.slow  # seeds many users (~12 s with its teardown): `make test-fast` leaves it out
async def test_when_too_few_of_the_hnsw_scans_rows_pass_the_filter_the_exact_search_answers(many_users, monkeypatch):
    """The namespace's 4 active items lie opposite the query, beyond the HNSW scan's 200 nearest
    rows; the status filter applies to the items those rows name."""
    backend, data = many_users
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", BIG)
    plans: list[bool] = []
    compose = vector_search._compose

    def recording(outer, condition, *, approximate):
        plans.append(approximate)
        return compose(outer, condition, approximate=approximate)

    monkeypatch.setattr(vector_search, "_compose", recording)
    found = await search_memories(backend.pool, facts_ns("sparse"), data.query(), k=10, filter={"status": "active"})
    assert sorted(m.key for m in found) == sorted(key for key, _, active in data.rows["sparse"] if active)
    assert plans == [True, False]  # the HNSW scan came back short, the exact plan answered


async def test_search_returns_fewer_than_k_when_the_user_has_fewer_and_never_a_filtered_out_item(backend, user_id):
    rng = np.random.default_rng(11)
    items = [
        BulkItem(facts_ns(user_id), f"k{i}", fact_value(f"k{i}", status="superseded" if i < 2 else "active"), unit(rng.standard_normal(DIMS)))
        for i in range(5)
    ]
    await write(backend.pool, items)
    found = await search_memories(backend.pool, facts_ns(user_id), unit(rng.standard_normal(DIMS)), k=10, filter={"status": "active"})
    assert sorted(m.key for m in found) == ["k2", "k3", "k4"]
    everything = await search_memories(backend.pool, facts_ns(user_id), unit(rng.standard_normal(DIMS)), k=10)
    assert len(everything) == 5


async def test_a_prefix_covers_the_users_sub_namespaces_but_not_lookalike_user_ids(backend):
    rng = np.random.default_rng(12)
    tag = uuid.uuid4().hex[:6]
    owner, wildcard_twin, longer_id = f"a_b{tag}", f"axb{tag}", f"a_b{tag}x"  # '_' is a LIKE wildcard
    items = [
        BulkItem(ns, f"{ns[1]}-{ns[2]}", {"text": "x", "status": "active"}, unit(rng.standard_normal(DIMS)))
        for user in (owner, wildcard_twin, longer_id)
        for ns in (facts_ns(user), tasks_ns(user))
    ]
    await write(backend.pool, items)
    found = await search_memories(backend.pool, ("users", owner), unit(rng.standard_normal(DIMS)), k=10)
    assert sorted(m.namespace for m in found) == sorted([facts_ns(owner), tasks_ns(owner)])


async def test_search_reads_items_written_through_the_store_as_store_asearch_ranks_them(backend, user_id):
    for i, text in enumerate(["Lives in Haifa", "Has a dog named Rex", "Works as a nurse", "Learns Italian"]):
        await backend.store.aput(facts_ns(user_id), f"f{i}", Fact(id=f"f{i}", text=text).model_dump(mode="json"))
    question = "Where does the user live?"
    query = await backend.embeddings.embeddings.aembed_query(question)
    found = await search_memories(backend.pool, facts_ns(user_id), query, k=4, filter={"status": "active"})
    through_store = await search_facts(backend.store, user_id, question, limit=4)
    assert [m.key for m in found] == [f.id for f, _ in through_store]
    assert [m.similarity for m in found] == pytest.approx([s for _, s in through_store], abs=1e-6)
    assert found[0].value["text"] == "Lives in Haifa"


async def test_a_vector_still_to_be_made_is_made_only_for_a_namespace_that_has_vectors(backend, user_id):
    """A search given the embedding's coroutine awaits it only when the namespace holds vectors: a new
    user's first turn searched facts, chats and tasks with a vector made for nothing (an encode of
    ~10-17 ms of CPU before the first token)."""
    made: list[str] = []

    async def embed(text: str):
        made.append(text)
        return await backend.embeddings.embeddings.aembed_query(text)

    assert await search_memories(backend.pool, facts_ns(user_id), embed("Where do I live?"), k=4) == []
    assert await rank_memories(backend.pool, tasks_ns(user_id), embed("my errands"), now=NOW, weights=WEIGHTS) == []
    assert made == []
    await backend.store.aput(facts_ns(user_id), "f0", Fact(id="f0", text="Lives in Haifa").model_dump(mode="json"))
    found = await search_memories(backend.pool, facts_ns(user_id), embed("Where do I live?"), k=4)
    assert [m.key for m in found] == ["f0"] and made == ["Where do I live?"]
    # A search refused, or one that ends before it needs the vector, closes the coroutine unstarted
    # (no "never awaited" warning, nothing embedded).
    refused = embed("refused")
    with pytest.raises(ValueError):
        await search_memories(backend.pool, facts_ns(user_id), refused, k=0)
    assert inspect.getcoroutinestate(refused) == inspect.CORO_CLOSED and made == ["Where do I live?"]


async def test_rank_memories_scores_exactly_as_recalls_python_formula(backend, user_id):
    rng = np.random.default_rng(13)
    query = unit(rng.standard_normal(DIMS))
    shapes = [
        ("high", NOW - timedelta(days=200), None),
        ("low", NOW - timedelta(days=1), None),
        ("medium", NOW - timedelta(days=90), NOW - timedelta(hours=5)),
        ("high", NOW - timedelta(days=30), NOW - timedelta(days=29)),
        ("medium", NOW + timedelta(days=1), None),  # written "in the future": age 0, as in Python
        ("low", NOW - timedelta(days=400), NOW - timedelta(days=2)),
    ]
    items, vectors = [], {}
    for i, (importance, updated, last_used) in enumerate(shapes):
        key = f"r{i}"
        vectors[key] = unit(query + rng.standard_normal(DIMS) * 0.08 * (i + 1))
        created = updated - timedelta(days=1) if i != 4 else NOW - timedelta(days=3)
        items.append(BulkItem(facts_ns(user_id), key, fact_value(key, importance=importance, updated=updated, last_used=last_used, created=created), vectors[key]))
    await write(backend.pool, items)

    ranked = await rank_memories(backend.pool, facts_ns(user_id), query, now=NOW, weights=WEIGHTS, limit=10, filter={"status": "active"})

    facts = {it.key: Fact.model_validate(it.value) for it in items}
    python = sorted(
        ((expected_score(float(vectors[key] @ query), fact, NOW), fact.created_at, key) for key, fact in facts.items()),
        key=lambda t: (-t[0], t[1]),
    )
    assert [m.key for m in ranked] == [key for _, _, key in python]
    assert [m.score for m in ranked] == pytest.approx([score for score, _, _ in python], abs=1e-6)
    weights = WEIGHTS
    for m in ranked:
        assert m.similarity == pytest.approx(float(vectors[m.key] @ query), abs=1e-6)
        assert m.importance == weights.importance_levels[facts[m.key].importance]
        when = facts[m.key].last_used or facts[m.key].updated_at
        age = max(0.0, (NOW - when).total_seconds() / 86400)
        assert m.recency == pytest.approx(math.exp(-age * math.log(2) / weights.half_life_days), abs=1e-9)


async def test_rank_memories_scores_only_the_most_similar_candidates(backend, user_id):
    rng = np.random.default_rng(14)
    query = unit(rng.standard_normal(DIMS))
    near = [
        BulkItem(facts_ns(user_id), f"near{i}", fact_value(f"near{i}", importance="low", updated=NOW - timedelta(days=300)), unit(query + rng.standard_normal(DIMS) * 0.11))
        for i in range(3)
    ]
    # Important and fresh but unrelated: scored against everything (as recall did), it would come first.
    other = rng.standard_normal(DIMS)
    far = BulkItem(facts_ns(user_id), "far", fact_value("far", importance="high"), unit(other - (other @ query) * query))
    await write(backend.pool, [*near, far])
    score = {it.key: expected_score(float(it.embedding @ query), Fact.model_validate(it.value), NOW) for it in (*near, far)}
    assert score["far"] > max(score[n.key] for n in near)

    ranked = await rank_memories(backend.pool, facts_ns(user_id), query, now=NOW, weights=WEIGHTS, candidates=3, limit=4)
    assert sorted(m.key for m in ranked) == ["near0", "near1", "near2"]
    wider = await rank_memories(backend.pool, facts_ns(user_id), query, now=NOW, weights=WEIGHTS, candidates=4, limit=4)
    assert wider[0].key == "far"


async def test_rank_memories_skips_items_that_do_not_validate_and_ranks_the_rest(backend, user_id):
    rng = np.random.default_rng(15)
    good = fact_value("good")
    bad_importance = {**fact_value("bad-importance"), "importance": "urgent"}
    bad_time = {**fact_value("bad-time"), "last_used": "yesterday"}
    bad_month = {**fact_value("bad-month"), "updated_at": "2026-13-45T00:00:00Z"}
    await write(backend.pool, [BulkItem(facts_ns(user_id), v["id"], v, unit(rng.standard_normal(DIMS))) for v in (good, bad_importance, bad_time, bad_month)])
    ranked = await rank_memories(backend.pool, facts_ns(user_id), unit(rng.standard_normal(DIMS)), now=NOW, weights=WEIGHTS)
    assert [m.key for m in ranked] == ["good"]


async def test_bad_arguments_are_refused_with_a_clear_error(backend, user_id):
    good = [0.1] * DIMS
    with pytest.raises(ValueError, match="k must be between"):
        await search_memories(backend.pool, facts_ns(user_id), good, k=0)
    with pytest.raises(ValueError, match="NaN"):
        await search_memories(backend.pool, facts_ns(user_id), [float("nan")] * DIMS)
    with pytest.raises(ValueError, match="empty"):
        await search_memories(backend.pool, facts_ns(user_id), [])
    with pytest.raises(ValueError, match="invalid namespace"):
        await search_memories(backend.pool, ("users", "a.b"), good)
    with pytest.raises(ValueError, match="timezone-aware"):
        await rank_memories(backend.pool, facts_ns(user_id), good, now=datetime(2026, 1, 1), weights=WEIGHTS)
    await write(backend.pool, [BulkItem(facts_ns(user_id), "one", fact_value("one"), unit(np.ones(DIMS)))])
    with pytest.raises(psycopg.errors.DataException, match="dimensions"):  # pgvector's own message
        await search_memories(backend.pool, facts_ns(user_id), [0.1, 0.2, 0.3])


async def test_a_bulk_load_with_an_existing_key_writes_nothing(backend, user_id):
    rng = np.random.default_rng(16)
    await write(backend.pool, [BulkItem(facts_ns(user_id), "dup", fact_value("dup"), unit(rng.standard_normal(DIMS)))])
    batch = [BulkItem(facts_ns(user_id), key, fact_value(key), unit(rng.standard_normal(DIMS))) for key in ("new1", "dup", "new2")]
    with pytest.raises(psycopg.errors.UniqueViolation):
        await write(backend.pool, batch)
    found = await search_memories(backend.pool, facts_ns(user_id), unit(rng.standard_normal(DIMS)), k=10)
    assert [m.key for m in found] == ["dup"]


async def test_bulk_loaded_items_are_read_by_the_store_like_items_it_wrote(backend, user_id):
    text = "Keeps bees on the roof of her building"
    vector = await backend.embeddings.embeddings.aembed_query(text)
    value = fact_value("bees") | {"text": text}
    await write(backend.pool, [BulkItem(facts_ns(user_id), "bees", value, vector)])
    item = await backend.store.aget(facts_ns(user_id), "bees")
    assert item is not None and item.value == value
    hits = await backend.store.asearch(facts_ns(user_id), query=text, limit=1)
    assert [h.key for h in hits] == ["bees"] and hits[0].score == pytest.approx(1.0, abs=1e-5)


