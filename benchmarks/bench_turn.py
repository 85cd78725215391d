"""Time whole chat turns through the compiled graph (not a pytest test).

    python -m benchmarks.bench_turn [--turns 40] [--facts 200] [--messages 0]
                                    [--other-users 0 [--other-facts 1000] [--other-messages 0]] [--warmup 1]
                                    [--large-at T] [--history N] [--json PATH]

Runs on a throwaway embedded Postgres with the real embeddings (all-MiniLM-L6-v2
in numpy) and the offline model, one chat whose every turn sends a new message
(``MESSAGES``: 46 of them), so the figures are the agent's own overhead:
memory recall, retrieval, prompt building, summary folds, extraction and the
Postgres writes — everything but the LLM's own latency. Prints p50/p95 per node
and per turn, plus the machine.

The stored facts are bulk-loaded, not written one by one: a few hundred distinct fact
texts are embedded with the real model, and each stored fact reuses one of those vectors
with a little noise (its text numbered to stay distinct). ``--other-users`` puts that many
other users, ``--other-facts`` facts each, in the same tables. A user large enough
(``storage.vector_search.LARGE_NAMESPACE`` facts, ``storage.episodes.LARGE_OWNER`` messages) is
searched through their partition's shared HNSW (and GIN) index, iteratively; no user has an index
of their own, so nothing is built per user. ``--large-at T`` makes T both thresholds for this run
only: a simulation, so that thousands of large users fit on 2 cores. The planning time of each search statement is printed at the end, and ``--json PATH``
writes the figures. Seeding progress goes to stderr.

``--history N`` starts the timed chat N messages long (a user's long-running chat: earlier
exchanges a day apart, written into the chat in one step and indexed, its older part folded out of
the model's view), so the figures show what a turn costs as a chat grows; the chat's record and
summary are left to the turns.

``--messages N`` seeds N messages of the user into the episodic index (``storage.episodes``,
bulk COPY through its ``copy_episodes``), in chats of ``CHAT_LENGTH`` messages spread over the
past two years, and ``--other-messages M`` gives each other user M; as with facts, a few hundred
distinct sentences are embedded and each row reuses one vector with a little noise. The index's
secondary indexes are dropped for the load and built once after it. The seeding rate is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone

from langchain_core.messages import HumanMessage

# The chat: every turn sends a message not sent before (a real chat does not repeat itself, and a
# repeated message would find its vector cached and its rows in Postgres' pages); past the end of
# the list they repeat.
MESSAGES = [
    "My name is Dana and I live in Haifa.",
    "I work as a nurse at Rambam hospital.",
    "Remind me to renew my passport next week.",
    "I prefer short answers with bullet points.",
    "What should I pack for a weekend in Rome?",
    "I have a dog named Rex who hates the rain.",
    "Can you suggest a simple dinner for tonight?",
    "I'm learning Italian, my level is A2.",
    "What did my sister say about the loan for the flat last spring?",
    "Do you remember when I started the new job at the bank?",
    "I need ideas for a birthday present for my nephew.",
    "How long did my knee surgery recovery take?",
    "Which vegan curry recipe did I like best?",
    "When are we going to Kyoto again?",
    "Tell me something about black holes.",
    "My violin teacher moved to Lisbon, can you believe it?",
    "What was the name of the animal shelter I volunteered at?",
    "I'm thinking about selling my old Vespa.",
    "Can you help me plan a week of yoga?",
    "What did I say about the kids' school meeting?",
    "Write a haiku about autumn rain.",
    "I got a new laptop, it's really fast.",
    "Did I mention my astronomy club?",
    "How do I make sourdough bread without a starter?",
    "Let's talk about jazz records from the fifties.",
    "Remind me what we planned for mountain biking.",
    "I'm worried about the exam next month.",
    "Why do crowded beaches stress me out so much?",
    "Which board games did we discuss for the party?",
    "What is the capital of Australia?",
    "I finally learned some Japanese phrases.",
    "My peanut allergy flared up again yesterday.",
    "Remember the trip we planned to the Sea of Galilee?",
    "What's a good book on ancient history?",
    "I collected three new vintage stamps today.",
    "Could you summarize our talk about the mobile app?",
    "I cooked Italian food for ten people.",
    "How was my mood last week according to what I told you?",
    "Rex chewed my running shoes this morning.",
    "Add buying a gift for my mother to my list.",
    "Is it better to stretch before or after a run?",
    "My shift at the hospital moved to nights.",
    "What do you know about my trip to Rome so far?",
    "Thanks, that helps a lot.",
    "I want to start saving for a new car.",
    "Can you explain how interest on a mortgage works?",
]

# Distinct fact texts to embed (subjects × details): the stored facts are variations of these.
SUBJECTS = [
    "Likes", "Is allergic to", "Plays", "Collects", "Wants to learn", "Reads about", "Travels often to",
    "Cooks", "Works on", "Volunteers at", "Owns", "Dislikes", "Practises", "Grew up near", "Saves money for",
]
DETAILS = [
    "Italian food", "peanuts", "the violin", "vintage stamps", "Japanese", "ancient history", "Lisbon",
    "vegan curries", "a mobile app", "the animal shelter", "an old Vespa", "crowded beaches", "yoga",
    "the Sea of Galilee", "a new laptop", "jazz records", "mountain biking", "board games", "sourdough bread",
    "astronomy",
]
IMPORTANCE = ("low", "medium", "high")
BLOCK = 10_000
CHAT_LENGTH = 100  # messages per seeded chat
# Distinct message texts (openers × topics): the seeded messages are variations of these.
OPENERS = [
    "Yesterday I finally talked about", "Can you remind me what we said about", "I have been thinking a lot about",
    "My sister keeps asking me about", "Last week we made a plan for", "I am a bit worried about",
    "Here is an update on", "Do you remember my question about", "I just read an article on", "We should talk again about",
]
TOPICS = DETAILS + ["the loan for the flat", "my new job at the bank", "the trip to Kyoto", "the kids' school", "my knee surgery"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class NoisyVectors:
    """Real embeddings of a few hundred ``texts``; each seeded row reuses one with a little noise."""

    def __init__(self, embeddings, texts: list[str], seed: int) -> None:
        import numpy as np

        self.texts = texts
        self.base = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
        self.rng = np.random.default_rng(seed)

    def sample(self, count: int):
        """(indices into ``texts``, unit vectors near theirs) for ``count`` rows."""
        import numpy as np

        pick = self.rng.integers(0, len(self.texts), count)
        vectors = self.base[pick] + self.rng.standard_normal((count, self.base.shape[1])).astype(np.float32) * 0.01
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return pick, vectors


async def load_blocks(conn, owners: list[tuple[str, int]], rows, copy, unit: str, started: float) -> None:
    """``copy(conn, rows(owner, first, count))`` in blocks of BLOCK for each (owner, count); progress and rate to stderr."""
    total = sum(count for _, count in owners)
    load_started = time.perf_counter()
    done = 0
    for owner, count in owners:
        for first in range(0, count, BLOCK):
            loaded = await copy(conn, rows(owner, first, min(BLOCK, count - first)))
            done += loaded
            if done // 50_000 != (done - loaded) // 50_000 or done == total:
                rate = done / (time.perf_counter() - load_started)
                note(f"loaded {done:,}/{total:,} {unit} ({time.perf_counter() - started:.0f} s, {rate:,.0f} {unit}/s)")


class FactSeeder(NoisyVectors):
    """Facts with stored embeddings (see NoisyVectors)."""

    def __init__(self, embeddings, seed: int = 3) -> None:
        super().__init__(embeddings, [f"{s} {d}" for s in SUBJECTS for d in DETAILS], seed)

    def items(self, user_id: str, first: int, count: int) -> list:
        from core.namespaces import facts_ns
        from core.schemas import Fact, text_hash
        from storage.bulk_load import BulkItem

        now = datetime.now(timezone.utc)
        pick, vectors = self.sample(count)
        ages = self.rng.uniform(0, 365, count)
        levels = self.rng.integers(0, 3, count)
        out = []
        for i in range(count):
            text = f"{self.texts[pick[i]]} (note {first + i})"
            when = now - timedelta(days=float(ages[i]))
            fact = Fact(id=str(uuid.uuid4()), text=text, importance=IMPORTANCE[levels[i]], hash=text_hash(text), created_at=when, updated_at=when)
            out.append(BulkItem(facts_ns(user_id), fact.id, fact.model_dump(mode="json"), vectors[i], created_at=when))
        return out


async def bulk_seed(backend, seeder_class, unit: str, owners: list[tuple[str, int]], copy, rows, indexes_query: tuple, tables: list[str]) -> float:
    """Load every owner's rows in blocks with the indexes ``indexes_query`` finds (name, def) dropped
    during the load and built once after it (many times faster than row by row); the seconds taken."""
    total = sum(count for _, count in owners)
    if not total:
        return 0.0
    started = time.perf_counter()
    seeder = seeder_class(backend.embeddings.embeddings)
    note(f"embedded {len(seeder.texts)} distinct texts in {time.perf_counter() - started:.1f} s; loading {total:,} {unit}")
    loading = time.perf_counter()
    async with backend.pool.connection() as conn:
        indexes = await (await conn.execute(*indexes_query)).fetchall()
        for index in indexes:
            await conn.execute(f'DROP INDEX "{index["indexname"]}"')
        await load_blocks(conn, owners, getattr(seeder, rows), copy, unit, started)
        note(f"building {', '.join(i['indexname'] for i in indexes)}")
        await conn.execute("SET maintenance_work_mem = '1GB'")
        for index in indexes:
            # pg_indexes writes a partitioned table's index "ON ONLY" (the parent alone, no
            # partition's): rebuilt as written, the partitions would have no index at all.
            await conn.execute(index["indexdef"].replace(" ON ONLY ", " ON ", 1))
        await conn.execute("RESET maintenance_work_mem")
        for table in tables:
            await conn.execute(f"VACUUM ANALYZE {table}")
        # The load's dirty pages written out now, not by the background checkpointer during the timed turns.
        await conn.execute("CHECKPOINT")
    elapsed = time.perf_counter() - loading
    note(f"seeded {total:,} {unit} in {elapsed:.0f} s ({total / elapsed:,.0f} {unit}/s, the index builds included)")
    return elapsed


async def seed(backend, user: str, facts: int, other_users: int, other_facts: int) -> None:
    from storage import vector_search
    from storage.bulk_load import copy_items

    owners = [(user, facts)] + [(f"other{i:05d}", other_facts) for i in range(other_users)]
    # The partitions' HNSW index: dropped for the load and built once after it.
    query = ("SELECT indexname, indexdef FROM pg_indexes WHERE indexname = %s", (vector_search.ANN_INDEX,))
    await bulk_seed(backend, FactSeeder, "facts", owners, copy_items, "items", query, ["store", "store_vectors"])


class MessageSeeder(NoisyVectors):
    """Episodic-index rows with stored embeddings (see NoisyVectors)."""

    def __init__(self, embeddings, seed: int = 5) -> None:
        super().__init__(embeddings, [f"{o} {t}." for o in OPENERS for t in TOPICS], seed)

    def rows(self, owner: str, first: int, count: int) -> list:
        """Messages ``first .. first + count`` of ``owner`` (chat ``i // CHAT_LENGTH``, position ``i % CHAT_LENGTH``)."""
        from storage.episodes import Episode

        now = datetime.now(timezone.utc)
        pick, vectors = self.sample(count)
        out = []
        for k in range(count):
            i = first + k
            when = now - timedelta(days=730) + timedelta(minutes=i)  # a message a minute, oldest first
            out.append(
                Episode(
                    owner=owner, thread_id=f"{owner}-chat{i // CHAT_LENGTH:06d}", message_id=f"{owner}-m{i}",
                    position=i % CHAT_LENGTH, role="user" if i % 2 == 0 else "assistant", sent_at=when,
                    content=f"{self.texts[pick[k]]} (note {i})", embedding=vectors[k],
                )
            )
        return out


async def seed_messages(backend, user: str, messages: int, other_users: int, other_messages: int) -> None:
    if not messages + other_users * other_messages:
        return
    from storage.episodes import TABLE, copy_episodes

    owners = [(user, messages)] + [(f"other{i:05d}", other_messages) for i in range(other_users)]
    query = ("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT LIKE %s", (TABLE, "%_pkey"))
    # bulk_seed analyzes the table once after the load: the statistics marks are not analyzed one by one.
    copy = functools.partial(copy_episodes, analyze=False)
    await bulk_seed(backend, MessageSeeder, "messages", owners, copy, "rows", query, [TABLE])


HISTORY_IN_VIEW = 6  # messages of a seeded history left in the model's view (the rest counts as folded)


async def seed_history(graph, backend, user: str, config: dict, messages: int) -> None:
    """The chat ``messages`` long before the timed turns: exchanges a day apart, each message
    stamped with its time, written in one step and indexed once (as the memory phase would have)."""
    if messages <= 0:
        return
    from langchain_core.messages import AIMessage

    from core.messages import stamp_sent_at
    from core.state import LAST_NODE
    from memory import episodes
    from storage import thread_owners
    from storage.memory_store import memory_store

    started = time.perf_counter()
    first = datetime.now(timezone.utc) - timedelta(days=messages // 2 + 1)
    history = []
    for i in range(messages):
        when = first + timedelta(days=i // 2, minutes=i % 2)
        topic = MESSAGES[(i // 2) % len(MESSAGES)]
        message = (HumanMessage(f"{topic} (day {i // 2})", id=str(uuid.uuid4())) if i % 2 == 0
                   else AIMessage(f"(offline model) Noted, day {i // 2}.", id=str(uuid.uuid4())))
        history.append(stamp_sent_at(message, when))
    thread_id = config["configurable"]["thread_id"]
    await thread_owners.claim_ownership(backend.pool, thread_id, user)
    await graph.aupdate_state(config, {"messages": []}, as_node=LAST_NODE)  # the chat before its first message
    cursor = history[-HISTORY_IN_VIEW - 1].id if messages > HISTORY_IN_VIEW else None
    await graph.aupdate_state(config, {"messages": history, "summarized_through": cursor, "user_turns": messages // 2}, as_node=LAST_NODE)
    ours = memory_store(backend.store)
    await episodes.index_thread(ours.pool, ours.embeddings, user, thread_id, history, checkpointer=backend.checkpointer)
    note(f"seeded a chat of {messages:,} messages in {time.perf_counter() - started:.0f} s")


async def planning_times(backend, user: str) -> dict[str, float]:
    """Median planning ms (EXPLAIN (SUMMARY), 5 runs) of each search statement of ``user``."""
    from benchmarks.bench_planning import planning

    async with backend.pool.connection() as conn:
        return await planning(conn, user)


async def run(
    turns: int, facts: int, other_users: int, other_facts: int, messages: int = 0, other_messages: int = 0, warmup: int = 1,
    large_at: int | None = None, json_path: str | None = None, history: int = 0,
) -> None:
    import pgserver

    from storage import episodes, vector_search

    if large_at is not None:
        # This run only: every per-user choice that depends on size keys on these two.
        episodes.LARGE_OWNER = vector_search.LARGE_NAMESPACE = large_at

    from graph.assembly import COMMIT_POINT, NODES, compile_graph, reply_phase_durability
    from core.context import Context
    from memory.backend import open_memory

    directory = tempfile.mkdtemp(prefix="ma-bench-")
    server = pgserver.get_server(directory, cleanup_mode="delete")
    try:
        async with open_memory(server.get_uri()) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)
            user = f"bench-{uuid.uuid4().hex[:6]}"
            await seed(backend, user, facts, other_users, other_facts)
            await seed_messages(backend, user, messages, other_users, other_messages)
            ctx = Context(user_id=user, model="offline")
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            await seed_history(graph, backend, user, config, history)
            per_node: dict[str, list[float]] = defaultdict(list)
            per_turn: list[float] = []
            for i in range(-warmup, turns):
                text = MESSAGES[i % len(MESSAGES)]
                start = last = time.perf_counter()
                # The two phases as a chat runs them (app/runs/turn_runner.py): the reply phase up to
                # the commit point, saved as production saves it, then the memory phase.
                phases = (
                    ({"messages": [HumanMessage(text)]}, {"interrupt_before": [COMMIT_POINT], "durability": reply_phase_durability(i == -warmup and not history)}),
                    (None, {}),
                )
                for graph_input, options in phases:
                    async for update in graph.astream(graph_input, config, context=ctx, stream_mode="updates", **options):
                        now = time.perf_counter()
                        for node in update:
                            if i >= 0 and node in NODES:  # a warm-up turn pays the process's one-off costs (first queries, cached vectors)
                                per_node[node].append((now - last) * 1000)
                        last = now
                if i >= 0:
                    per_turn.append((time.perf_counter() - start) * 1000)
            planned = await planning_times(backend, user)
            async with backend.pool.connection() as conn:
                row = await (await conn.execute("SELECT count(*) AS n FROM pg_class WHERE relkind = 'i'")).fetchone()
                index_count = row["n"]
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    others = f", other users: {other_users:,} × {other_facts:,} facts and {other_messages:,} messages" if other_users else ""
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    chat = f", the chat {history:,} messages long before them" if history else ""
    print(f"turns: {turns} (after {warmup} untimed warm-up){chat}, stored facts: {facts}, indexed messages: {messages:,}{others}, model: offline, embeddings: all-MiniLM-L6-v2 (numpy)")
    print("load_context per turn (ms):", " ".join(f"{v:.0f}" for v in per_node["load_context"]))
    print(f"{'step':<18}{'p50 ms':>10}{'p95 ms':>10}")
    for node, values in per_node.items():
        print(f"{node:<18}{statistics.median(values):>10.1f}{pct(values, 0.95):>10.1f}")
    print(f"{'whole turn':<18}{statistics.median(per_turn):>10.1f}{pct(per_turn, 0.95):>10.1f}")
    large = f" (large at {large_at:,}: a simulation, see benchmarks/README.md)" if large_at is not None else ""
    print(f"planning ms of each search statement of the user, median of 7{large}; {index_count:,} indexes in the database:")
    for name, ms in planned.items():
        print(f"  {name:<24}{ms:>8.2f}")
    if json_path:
        import json

        result = {
            "load_context_ms": {"p50": statistics.median(per_node["load_context"]), "p95": pct(per_node["load_context"], 0.95)},
            "turn_ms": {"p50": statistics.median(per_turn), "p95": pct(per_turn, 0.95)},
            "nodes_ms": {node: {"p50": statistics.median(v), "p95": pct(v, 0.95)} for node, v in per_node.items()},
            "planning_ms": planned,
            "indexes": index_count,
            "args": {"turns": turns, "facts": facts, "messages": messages, "other_users": other_users, "other_facts": other_facts,
                     "other_messages": other_messages, "large_at": large_at, "warmup": warmup, "history": history},
            "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg(), "processor": platform.processor()},
        }
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--facts", type=int, default=200, help="facts stored before the run")
    parser.add_argument("--messages", type=int, default=0, help="the user's messages in the episodic index before the run")
    parser.add_argument("--other-users", type=int, default=0, help="other users with facts (and messages) in the same tables")
    parser.add_argument("--other-facts", type=int, default=1000, help="facts of each other user")
    parser.add_argument("--other-messages", type=int, default=0, help="indexed messages of each other user")
    parser.add_argument("--warmup", type=int, default=1, help="untimed turns first (the process's one-off costs)")
    parser.add_argument(
        "--large-at", type=int, help="this run only: the size from which a user counts as large (searched through the partition's HNSW index when cheaper), for messages and facts alike"
    )
    parser.add_argument("--history", type=int, default=0, help="the timed chat's length in messages before its first timed turn")
    parser.add_argument("--json", help="also write the figures here (load_context_ms, turn_ms, planning_ms, ...)")
    args = parser.parse_args()
    if min(args.turns, args.facts, args.messages, args.other_users, args.other_facts, args.other_messages, args.history) < 0 or args.turns == 0:
        parser.error("counts must be positive")
    if args.large_at is not None and args.large_at < 1:
        parser.error("--large-at must be at least 1")
    asyncio.run(
        run(args.turns, args.facts, args.other_users, args.other_facts, args.messages, args.other_messages, args.warmup,
            large_at=args.large_at, json_path=args.json, history=args.history)
    )


if __name__ == "__main__":
    main()
