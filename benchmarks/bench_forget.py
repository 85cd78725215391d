"""How long a forget takes, with 100,000 indexed messages of the user: python -m benchmarks.bench_forget.

Seeds the user's index of what was said (bench_turn's seeding: variations of a few hundred texts,
real MiniLM vectors with noise) plus ``--mentions`` messages that say the forgotten thing, and 200
facts; runs one real turn ("My name is Rosa, I live in Coimbra and I work as a nurse") so the fact,
the profile field and the chat record exist; then times ``forget_request("that I work as a nurse")``
(the CLI's /forget, POST /memory/forget and MCP's forget) in its two halves:

- **takes effect**: the store half (the ledger row, the facts, the field, in one transaction); from
  its commit no model call can carry the words (the redactor reads the ledger);
- **every copy**: the index rows rewritten (re-embedded), chat records and summaries redacted.

Then the next turn's load_context, to show the forget left nothing slow behind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def run(messages: int, mentions: int, repeats: int) -> None:
    import pgserver
    from langchain_core.messages import HumanMessage

    from benchmarks.bench_turn import seed, seed_messages
    from core.context import Context
    from graph.assembly import compile_graph
    from memory import forgetting
    from memory.backend import open_memory
    from memory.writer.forgets import forget_items
    from storage.episodes import Episode, copy_episodes

    directory = tempfile.mkdtemp(prefix="ma-bench-")
    server = pgserver.get_server(directory, cleanup_mode="delete")
    rows: list[tuple[float, float, int]] = []
    try:
        async with open_memory(server.get_uri()) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)
            for r in range(repeats):
                user = f"bench-{uuid.uuid4().hex[:6]}"
                await seed(backend, user, 200, 0, 0)
                await seed_messages(backend, user, messages, 0, 0)
                vectors = await backend.embeddings.embeddings.aembed_documents([f"My shift as a nurse ran late again ({i})" for i in range(mentions)])
                now = datetime.now(timezone.utc)
                said = [
                    Episode(owner=user, thread_id=f"{user}-nurse", message_id=f"{user}-n{i}", position=i, role="user",
                            sent_at=now - timedelta(days=mentions - i), content=f"My shift as a nurse ran late again ({i})", embedding=v)
                    for i, v in enumerate(vectors)
                ]
                async with backend.pool.connection() as conn:
                    await copy_episodes(conn, said)
                ctx = Context(user_id=user, model="offline")
                config = {"configurable": {"thread_id": str(uuid.uuid4())}}
                await graph.ainvoke({"messages": [HumanMessage("My name is Rosa, I live in Coimbra and I work as a nurse")]}, config, context=ctx)

                started = time.perf_counter()
                found = await forgetting.find_targets(backend.store, user, "that I work as a nurse")
                written = await forget_items(backend.store, user, [(c.target.part, c.target.key) for c in found], words="that I work as a nurse")
                effect = time.perf_counter() - started
                index_rows = await forgetting._redact_index(backend.store, backend.pool, user, written.redactor, written.texts, written.refs)
                await forgetting._redact_chats(backend.store, user, written.redactor)
                everything = time.perf_counter() - started
                rows.append((effect * 1000, everything * 1000, index_rows))
                note(f"run {r + 1}: takes effect {effect * 1000:.0f} ms, every copy {everything * 1000:.0f} ms ({index_rows} index rows rewritten)")
                started = time.perf_counter()
                await graph.ainvoke({"messages": [HumanMessage("What do you know about me?")]}, config, context=ctx)
                note(f"the next turn: {(time.perf_counter() - started) * 1000:.0f} ms")
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    print(f"indexed messages of the user: {messages:,} + {mentions} that say the forgotten thing; 200 facts; offline model")
    print(f"{'run':<6}{'takes effect ms':>18}{'every copy ms':>16}{'index rows':>12}")
    for i, (effect, everything, n) in enumerate(rows, 1):
        print(f"{i:<6}{effect:>18.0f}{everything:>16.0f}{n:>12}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="the user's indexed messages before the forget")
    parser.add_argument("--mentions", type=int, default=50, help="of which say the forgotten thing")
    parser.add_argument("--repeats", type=int, default=3, help="users seeded and forgotten in turn")
    args = parser.parse_args()
    asyncio.run(run(args.messages, args.mentions, args.repeats))


if __name__ == "__main__":
    main()
