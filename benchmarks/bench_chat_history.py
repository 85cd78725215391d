"""A chat grown turn by turn: its checkpoint storage, and how long an edit takes to find its fork point:
python -m benchmarks.bench_chat_history [--turns 1000] [--keep 50].

Two chats of ``--turns`` turns (a user message and a reply each, with their times, written as a
reply phase writes them: one checkpoint a turn holding the whole message list) in one throwaway
embedded Postgres: one keeps every checkpoint (``MEMORY_AGENT_HISTORY_TURNS=0``), the other is
trimmed every 10 turns to its last ``--keep`` as record_chat trims it. Reported: each chat's live
checkpoint data (after Postgres' compression), and the time of ``checkpoint_before`` (the fork point
of a regenerate or an edit) for the last message and for one ``--back`` turns before it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone

WORDS = ("garden basil tomato sister Lisbon trip June train bread river bees cello meeting report budget doctor "
         "run book movie coffee weekend dinner friend project deadline weather rain sun morning evening").split()


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def said(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + rng.choice(("", "s", "ing", "ed")) for _ in range(words))


async def grow(graph, pool, thread: str, turns: int, keep: int) -> list[str]:
    """The chat, turn by turn; the ids of its user messages."""
    from langchain_core.messages import AIMessage, HumanMessage

    from core.messages import stamp_sent_at
    from core.state import LAST_NODE
    from nodes.record_chat import TRIM_EVERY
    from storage.checkpoint_rows import trim_history

    rng, config, asked = random.Random(1), {"configurable": {"thread_id": thread}}, []
    start = datetime.now(timezone.utc) - timedelta(days=turns)
    for t in range(turns):
        when = start + timedelta(days=t)
        human = stamp_sent_at(HumanMessage(said(rng, 18), id=str(uuid.uuid4())), when)
        reply = stamp_sent_at(AIMessage(said(rng, 30), id=str(uuid.uuid4())), when + timedelta(seconds=5))
        await graph.aupdate_state(config, {"messages": [human, reply], "user_turns": t + 1}, as_node=LAST_NODE)
        asked.append(human.id)
        if keep and (t + 1) % TRIM_EVERY == 0:
            await trim_history(pool, thread, keep)
    return asked


async def live_bytes(pool, thread: str) -> tuple[int, int]:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT (SELECT coalesce(sum(pg_column_size(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %(t)s)"
                " + (SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) FROM checkpoints WHERE thread_id = %(t)s) AS live,"
                " (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS n",
                {"t": thread},
            )
        ).fetchone()
    return row["live"], row["n"]


async def fork_ms(graph, thread: str, message_id: str, repeats: int = 5) -> float:
    from app.http.routes_chats import checkpoint_before

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await checkpoint_before(graph, thread, message_id)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def run(turns: int, keep: int, back: int) -> None:
    import pgserver

    from graph.assembly import compile_graph
    from memory.backend import open_memory

    directory = tempfile.mkdtemp(prefix="ma-bench-history-")
    server = pgserver.get_server(directory, cleanup_mode="delete")
    rows = []
    try:
        async with open_memory(server.get_uri()) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)
            for label, kept in (("every checkpoint", 0), (f"the last {keep} turns", keep)):
                thread = str(uuid.uuid4())
                started = time.perf_counter()
                asked = await grow(graph, backend.pool, thread, turns, kept)
                note(f"{label}: grown to {2 * turns:,} messages in {time.perf_counter() - started:.0f} s")
                live, checkpoints = await live_bytes(backend.pool, thread)
                last = await fork_ms(graph, thread, asked[-1])
                earlier = await fork_ms(graph, thread, asked[-1 - back]) if back < min(turns, kept or turns) else None
                rows.append((label, live, checkpoints, last, earlier))
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    print(f"a chat of {turns:,} turns ({2 * turns:,} messages), grown turn by turn; checkpoints kept:")
    print(f"{'kept':<22}{'live MB':>10}{'checkpoints':>13}{'fork, last ms':>15}{f'fork, {back} back ms':>18}")
    for label, live, checkpoints, last, earlier in rows:
        shown = f"{earlier:.1f}" if earlier is not None else "refused"
        print(f"{label:<22}{live / 1e6:>10.1f}{checkpoints:>13,}{last:>15.1f}{shown:>18}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns of each chat (two messages each)")
    parser.add_argument("--keep", type=int, default=50, help="turns the trimmed chat keeps (MEMORY_AGENT_HISTORY_TURNS)")
    parser.add_argument("--back", type=int, default=40, help="the edited message this many turns before the last")
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.keep, args.back))


if __name__ == "__main__":
    main()
