"""Many users on one Postgres (issue 27): the per-user tables are hash-partitioned by owner, a
search plans over one partition whose indexes are the same whatever the number of users (no
user gets an index of their own), every statement names its owner, and an old database moves
over with nothing lost (storage/partitions.py, docs/scaling.md)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import datetime, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection, AsyncCursor, sql

from core.messages import stamp_sent_at
from core.namespaces import INDEXED_FIELDS, chats_ns, facts_ns, tasks_ns
from memory import episodes
from memory.backend import open_memory
from storage import episodes as episode_table
from storage import forget_ledger, thread_owners, vector_search
from storage.postgres import open_pool, prepare_database

SAID = datetime(2024, 5, 1, tzinfo=timezone.utc)


def conversation(user: str) -> list:
    texts = [f"{user} keeps bees on the roof", "How many hives?", "Three hives, and a fig tree", "Do the bees like the fig?"]
    return [stamp_sent_at((HumanMessage if i % 2 == 0 else AIMessage)(t, id=f"{user}-{i}"), SAID) for i, t in enumerate(texts)]


ITEMS = {
    facts_ns: ["Plays the cello on Sundays", "Is allergic to peanuts", "Grew up near Lisbon"],
    tasks_ns: ["Renew the passport", "Buy a gift for mother"],
    chats_ns: ["Planning the trip to Kyoto", "Sourdough without a starter"],
}


async def relkind(pool, table: str) -> str:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (table,))).fetchone()
    return row["relkind"]


def old_own_index(prefix: str, owner: str) -> str:
    """How the old layout named a large user's own index."""
    return prefix + hashlib.sha256(owner.encode()).hexdigest()[:24]


async def build_old_layout(url: str, minilm, monkeypatch) -> dict:
    """A database as main's code (before the partitions) wrote it: the store's vectors and the
    episodic index in plain tables, the store's HNSW over everyone's vectors, and a large user's
    own partial indexes on the plain tables. Returns what it holds."""
    await prepare_database(url)
    pool = await open_pool(url, max_size=4)
    try:
        store = AsyncPostgresStore(
            conn=pool,
            index={"dims": minilm.dims, "embed": minilm.embeddings, "fields": INDEXED_FIELDS, "distance_type": "cosine",
                   "ann_index_config": {"kind": "hnsw", "m": 16, "ef_construction": 64}},
        )
        await store.setup()
        async with pool.connection() as conn:
            for statement in episode_table.create_statements(minilm.dims, partitions=0):  # main's DDL
                if "USING hnsw" not in statement and "USING gin" not in statement:  # the old table had neither
                    await conn.execute(statement)
        await forget_ledger.setup(pool)  # the index's writes read it
        async with pool.connection() as conn:  # and who owns each thread (main had the table by then)
            for statement in thread_owners.CREATE:
                await conn.execute(statement)
        held: dict = {"items": [], "messages": []}
        for user in ("ann", "ben"):
            for namespace, texts in ITEMS.items():  # ben has fewer: below the line
                for i, text in enumerate(texts if user == "ann" else texts[:2]):
                    await store.aput(namespace(user), f"{user}{i}", {"text": f"{user}: {text}"})
                    held["items"].append((namespace(user), f"{user}{i}", f"{user}: {text}"))
            messages = conversation(user) if user == "ann" else conversation(user)[:3]
            await episodes.index_thread(pool, minilm.embeddings, user, f"t-{user}", messages)
            held["messages"] += [(user, m.id, m.content) for m in messages]
        async with pool.connection() as conn:  # ann is large: her own indexes, as main built them
            owner = sql.Literal("ann")
            hnsw, gin = old_own_index("memory_agent_episodes_hnsw_", "ann"), old_own_index("memory_agent_episodes_gin_", "ann")
            await conn.execute(sql.SQL("CREATE INDEX {} ON memory_agent_episodes USING hnsw (embedding vector_cosine_ops) WHERE owner = {}").format(sql.Identifier(hnsw), owner))
            await conn.execute(sql.SQL("CREATE INDEX {} ON memory_agent_episodes USING gin (tsv) WHERE owner = {}").format(sql.Identifier(gin), owner))
            await conn.execute(
                sql.SQL("CREATE INDEX {} ON store_vectors USING hnsw (embedding vector_cosine_ops) WHERE (prefix = {} OR prefix LIKE {} ESCAPE '\\')").format(
                    sql.Identifier(old_own_index("store_vectors_ns_", "users.ann.facts")), sql.Literal("users.ann.facts"), sql.Literal("users.ann.facts.%")
                )
            )
        assert await relkind(pool, "store_vectors") == "r" and await relkind(pool, episode_table.TABLE) == "r"
        return held
    finally:
        await pool.close()


@pytest.mark.slow
async def test_a_database_of_the_old_layout_is_migrated_and_every_fact_message_chat_and_task_is_still_found(new_database, minilm, monkeypatch, capsys):
    from app.cli.main import main as cli

    monkeypatch.setattr(episode_table, "LARGE_OWNER", 4)  # ann (4 messages, 3 facts) is large, ben is not
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", 3)
    url = new_database("old_layout")
    held = await build_old_layout(url, minilm, monkeypatch)
    emb = minilm.embeddings
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.delenv("MEMORY_AGENT_EMBEDDINGS", raising=False)  # the default: MiniLM, as the fixture's
    assert await asyncio.to_thread(cli, ["migrate"]) == 0  # the one command
    said = capsys.readouterr().out
    assert "migrated: memory_agent_episodes: 7 messages moved to 64 partitions by owner" in said, said
    assert "migrated: store_vectors: 13 vectors moved" in said and "per-user indexes of the old layout" in said, said
    async with open_memory(url, minilm) as backend:
        assert backend.migrated == []  # idempotent: the set-up finds the new layout
        pool = backend.pool
        assert await relkind(pool, "store_vectors") == "p" and await relkind(pool, episode_table.TABLE) == "p"
        for namespace, key, text in held["items"]:
            found = await vector_search.search_memories(pool, namespace, emb.embed_query(text), k=10)
            assert (namespace, key) in {(m.namespace, m.key) for m in found}, (namespace, key)
        for owner, message_id, text in held["messages"]:  # ann's through the partitions' HNSW and GIN indexes (large)
            found = await episode_table.search(pool, owner, text, emb.embed_query(text), k=10)
            assert message_id in {c.message_id for c in found} and all(c.thread_id == f"t-{owner}" for c in found)
        async with pool.connection() as conn:
            names = {r["relname"] for r in await (await conn.execute("SELECT relname FROM pg_class WHERE relkind IN ('i', 'I')")).fetchall()}
            assert not {n for n in names if re.match(r"(memory_agent_episodes_(hnsw|gin)|store_vectors_ns)_[0-9a-f]{24}$", n)}
            assert {episode_table.ANN_INDEX, episode_table.WORDS_INDEX, vector_search.ANN_INDEX} <= names
            gone = await (await conn.execute("SELECT to_regclass('store_vectors_embedding_idx') AS i")).fetchone()
            assert gone["i"] is None  # langgraph's index went with the plain table
        assert await episode_table.count(pool, "ann") == 4
    assert await asyncio.to_thread(cli, ["migrate"]) == 0
    assert "on the current layout already" in capsys.readouterr().out


async def plan_relations(conn, statement, params) -> list[str]:
    cur = await conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + statement, params, prepare=False)
    plan = (await cur.fetchone())["QUERY PLAN"]
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "Relation Name" in node:
                found.append(node["Relation Name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


async def indexes_on(conn, tables: set[str]) -> int:
    row = await (await conn.execute("SELECT count(*) AS n FROM pg_index WHERE indrelid = ANY(%s::regclass[])", (sorted(tables),))).fetchone()
    return row["n"]


async def all_indexes(conn) -> int:
    row = await (
        await conn.execute("SELECT count(*) AS n FROM pg_class WHERE relkind IN ('i', 'I') AND relname ~ '^(memory_agent_episodes|store_vectors)'")
    ).fetchone()
    return row["n"]


async def background_builds_done() -> None:
    """The old layout built a large user's own indexes in background tasks: wait for them, so this
    test sees what they built. (The current code has none.)"""
    tasks = [*getattr(vector_search, "_building", {}).values(), *getattr(episodes, "_building", set())]
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.slow
async def test_large_users_get_no_index_of_their_own_and_a_search_plans_over_the_same_indexes_whatever_their_number(new_database, minilm, monkeypatch):
    """The planner weighs every index of each table a statement touches: the old layout gave each
    large user indexes of their own, so the indexes a search weighed grew with the number of large
    users (issue 27: 244 ms to plan at 3,000 on one table, 33 ms on 64 partitions). Now a search
    touches its owner's partition, whose indexes are the same few for everyone."""
    monkeypatch.setattr(episode_table, "LARGE_OWNER", 2)
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", 2)
    monkeypatch.setattr(episode_table, "through_hnsw", lambda *size: True)
    monkeypatch.setattr(vector_search, "through_hnsw", lambda *size: True)
    large = [f"big{i:02d}" for i in range(16)]
    async with open_memory(new_database("planning"), minilm) as backend:
        pool = backend.pool
        vec = minilm.embeddings.embed_query("bees on the roof")
        async with pool.connection() as conn:
            before = await all_indexes(conn)
        for owner in large:  # each large, written and searched the way a chat does
            await episodes.index_for_run(backend.store, owner, f"t-{owner}", conversation(owner))
            await backend.store.aput(facts_ns(owner), "k", {"text": "bees on the roof"})
            await backend.store.aput(facts_ns(owner), "k2", {"text": "a fig tree"})
            for _ in range(2):  # the first search learns the namespace is large
                await vector_search.search_memories(pool, facts_ns(owner), vec)
                await episodes.fused_search(pool, minilm.embeddings, owner, "bees on the roof")
        await background_builds_done()
        async with pool.connection() as conn:
            assert await all_indexes(conn) == before  # nothing was built for anyone
            for owner in (large[0], "someone-small"):
                for is_large in (True, False):
                    words, rows_statement = episode_table.search_statements(conn, owner, large=is_large)
                    base = {"q": "bees", "stop": [], "k": 30, "per_word": episode_table.PER_WORD, "common_sample": episode_table.COMMON_SAMPLE, "common_share": None, "common_min": 1, "since": None, "until": None, "thread": "", "exclude": []}
                    statements = [(words, base), (rows_statement, base | {"vector": str(vec), "similar_to": str(vec), "lexemes": ["bee"], "weights": [1.0],
                                                                            "text_threads": ["t"], "text_messages": ["m0"], "text_ranks": [1]})]
                    for name, (text, params) in vector_search.planned_statements(conn, facts_ns(owner), vec).items():
                        statements.append((sql.SQL(text), params))
                    for statement, params in statements:
                        touched = {r for r in await plan_relations(conn, statement, params) if r.startswith(("memory_agent_episodes", "store_vectors"))}
                        per_table = {t.rsplit("_p", 1)[0] for t in touched}
                        assert len(touched) == len(per_table), touched  # one partition of each table
                        # pkey + 2 btrees + HNSW + GIN, or pkey + prefix btree + HNSW: each partition's own
                        assert await indexes_on(conn, touched) <= 5 * len(touched), touched


class Recorder:
    """Every statement our storage code sends, as text (a psycopg wrapper: Postgres here has no
    pg_stat_statements)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def text(self, conn, query) -> str:
        return query.as_string(conn) if isinstance(query, sql.Composable) else str(query)


TABLE_REFERENCE = r"\b(?:FROM|JOIN|UPDATE|INTO)\s+\"?{table}\"?(?:\s|$)"
OWNER_CONDITION = r"(?<![\w\"])(?:\w+\.)?\"?{column}\"?\s*=\s*(?:'|%s|%\(\w+\)s|\$\d)"


async def test_every_statement_on_the_per_user_tables_names_its_owner(backend, user_id, minilm, monkeypatch):
    """A router query: each reference to a per-user table comes with ``owner = …`` (``prefix = …``
    for the store's vectors), the distribution column Citus would route on (docs/scaling.md)."""
    recorder = Recorder()
    for cls in (AsyncConnection, AsyncCursor):
        original = cls.execute

        def wrapped(self, query, *args, __original=original, **kwargs):
            conn = self if isinstance(self, AsyncConnection) else self.connection
            recorder.statements.append(recorder.text(conn, query))
            return __original(self, query, *args, **kwargs)

        monkeypatch.setattr(cls, "execute", wrapped)
    original_many = AsyncCursor.executemany

    async def many(self, query, *args, **kwargs):
        recorder.statements.append(recorder.text(self.connection, query))
        return await original_many(self, query, *args, **kwargs)

    monkeypatch.setattr(AsyncCursor, "executemany", many)

    emb = minilm.embeddings
    pool = backend.pool
    messages = conversation(user_id)
    monkeypatch.setattr(episode_table, "LARGE_OWNER", 3)  # both shapes of each search: small, then large
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", 3)
    monkeypatch.setattr(episode_table, "through_hnsw", lambda *size: True)  # a few rows: the index only when told
    monkeypatch.setattr(vector_search, "through_hnsw", lambda *size: True)
    monkeypatch.setattr(episode_table, "STATISTICS_FROM", 1)  # the statistics refresh's statements too
    await episodes.index_thread(pool, emb, user_id, "t1", messages)
    await episodes.index_thread(pool, emb, user_id, "t1", messages[:2] + messages[3:])  # an edit: rows dropped and moved
    await episodes.fused_search(pool, emb, user_id, "bees on the roof")
    await episode_table.indexed_positions(pool, user_id, "t1")
    await episode_table.search(pool, user_id, "bees", emb.embed_query("bees"))
    await episode_table.delete_messages(pool, user_id, "t1", [messages[0].id])
    await episode_table.delete_thread(pool, user_id, "t1")
    await episode_table.delete_owner(pool, user_id)
    for i in range(3):
        await backend.store.aput(facts_ns(user_id), f"k{i}", {"text": f"fact {i} about bees"})
    await vector_search.search_memories(pool, facts_ns(user_id), emb.embed_query("bees"))
    await vector_search.search_memories(pool, facts_ns(user_id), emb.embed_query("bees"))  # large now: the HNSW shape
    monkeypatch.undo()

    checked = 0
    for statement in recorder.statements:
        if re.match(r"\s*(CREATE|DROP|ALTER|SET|RESET|BEGIN|COMMIT|SAVEPOINT|RELEASE|ANALYZE)\b", statement, re.I):
            continue
        for table, column in ((episode_table.TABLE, "owner"), (episode_table.COUNTS, "owner"), ("store_vectors", "prefix")):
            references = len(re.findall(TABLE_REFERENCE.format(table=table), statement, re.I))
            if not references:
                continue
            checked += 1
            if re.search(rf"INSERT\s+INTO\s+{table}\s*(?:AS\s+\w+\s*)?\(\s*{column}\b", statement, re.I):
                continue  # the row's own value routes it
            conditions = len(re.findall(OWNER_CONDITION.format(column=column), statement, re.I))
            assert conditions >= references, f"a reference to {table} without its {column}: {statement}"
    assert checked >= 12



@pytest.mark.slow
async def test_a_search_leaves_the_connections_prepared_statements_in_place(new_database, minilm, monkeypatch):
    """A search through the shared HNSW index ended its settings' transaction with a ROLLBACK, and
    psycopg empties a connection's whole cache of prepared statements on a ROLLBACK: every statement
    after it on that connection was prepared again (19 of a turn's ~22). Its own statements, which
    name their owner as a literal and are no use to the next owner, are not prepared at all."""
    monkeypatch.setattr(episode_table, "LARGE_OWNER", 2)
    monkeypatch.setattr(vector_search, "LARGE_NAMESPACE", 2)
    monkeypatch.setattr(episode_table, "through_hnsw", lambda *size: True)
    monkeypatch.setattr(vector_search, "through_hnsw", lambda *size: True)
    url = new_database("prepared")
    owner = "big-owner"
    async with open_memory(url, minilm) as backend:
        await episodes.index_for_run(backend.store, owner, f"t-{owner}", conversation(owner))
        await backend.store.aput(facts_ns(owner), "k", {"text": "bees on the roof"})
        await backend.store.aput(facts_ns(owner), "k2", {"text": "a fig tree"})
    vec = minilm.embeddings.embed_query("bees on the roof")
    pool = await open_pool(url, max_size=1)  # one connection: every statement below runs on it
    try:
        async with pool.connection() as conn:
            await conn.execute("SELECT 1 AS marker")  # prepared at once (prepare_threshold 0)
        for _ in range(2):
            assert await episode_table.search(pool, owner, "bees on the roof", vec, k=5)
            assert await vector_search.search_memories(pool, facts_ns(owner), vec)
        async with pool.connection() as conn:
            prepared = [r["statement"] for r in await (await conn.execute("SELECT statement FROM pg_prepared_statements")).fetchall()]
    finally:
        await pool.close()
    assert "SELECT 1 AS marker" in prepared, prepared
    assert not [s for s in prepared if f"'{owner}'" in s], prepared
