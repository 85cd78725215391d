"""Time whole chat turns through the compiled graph (not a pytest test).

    python -m benchmarks.bench_turn [--turns 40] [--facts 200]

Runs on a throwaway embedded Postgres with the real embeddings (all-MiniLM-L6-v2
in numpy) and the offline model, so the figures are the agent's own overhead:
memory recall, retrieval, prompt building, summary folds, extraction and the
Postgres writes — everything but the LLM's own latency. Prints p50/p95 per node
and per turn, plus the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from collections import defaultdict

from langchain_core.messages import HumanMessage

MESSAGES = [
    "My name is Dana and I live in Haifa.",
    "I work as a nurse at Rambam hospital.",
    "Remind me to renew my passport next week.",
    "I prefer short answers with bullet points.",
    "What should I pack for a weekend in Rome?",
    "I have a dog named Rex who hates the rain.",
    "Can you suggest a simple dinner for tonight?",
    "I'm learning Italian, my level is A2.",
]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


async def run(turns: int, facts: int) -> None:
    import pgserver

    from graph.assembly import compile_graph
    from core.context import Context
    from memory.backend import open_memory
    from memory.memory_writer import apply_extraction
    from core.schemas import ExtractionResult, NewFact

    directory = tempfile.mkdtemp(prefix="ma-bench-")
    server = pgserver.get_server(directory, cleanup_mode="delete")
    try:
        async with open_memory(server.get_uri()) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)
            user = f"bench-{uuid.uuid4().hex[:6]}"
            if facts:
                seed = ExtractionResult(new_facts=[NewFact(text=f"Fact number {i}: likes topic {i * 7 % 97}") for i in range(facts)])
                await apply_extraction(backend.store, user, seed)
            ctx = Context(user_id=user, model="offline")
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            per_node: dict[str, list[float]] = defaultdict(list)
            per_turn: list[float] = []
            for i in range(turns):
                text = MESSAGES[i % len(MESSAGES)]
                start = last = time.perf_counter()
                async for update in graph.astream({"messages": [HumanMessage(text)]}, config, context=ctx, stream_mode="updates"):
                    now = time.perf_counter()
                    for node in update:
                        per_node[node].append((now - last) * 1000)
                    last = now
                per_turn.append((time.perf_counter() - start) * 1000)
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"turns: {turns}, stored facts: {facts}, model: offline, embeddings: all-MiniLM-L6-v2 (numpy)")
    print(f"{'step':<18}{'p50 ms':>10}{'p95 ms':>10}")
    for node, values in per_node.items():
        print(f"{node:<18}{statistics.median(values):>10.1f}{pct(values, 0.95):>10.1f}")
    print(f"{'whole turn':<18}{statistics.median(per_turn):>10.1f}{pct(per_turn, 0.95):>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--facts", type=int, default=200, help="facts stored before the run")
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.facts))


if __name__ == "__main__":
    main()
