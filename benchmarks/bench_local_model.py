"""Time chat turns on the real local model (not a pytest test, not in `make bench`: minutes per model).

    python -m benchmarks.bench_local_model [--model 0.5b|1.5b] [--turns 4] [--threads N]

Starts `memory-agent local`'s llama-cpp-python server (the runtime and model must be
prepared: `memory-agent local prepare --model M`), measures the server's raw speed on a
fixed ~1,000-token prompt, then runs turns through the whole graph (reply with tools,
summary, extraction) on a throwaway embedded Postgres. Prints per-turn and per-node
times, model calls and tokens per turn, the structured-output mode the server ended up
needing, and the load average before and after (other work on the machine slows
llama.cpp a lot: say it next to the figures).
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

import httpx
from langchain_core.messages import HumanMessage

MESSAGES = [
    "My name is Dana and I live in Haifa.",
    "I work as a nurse at Rambam hospital.",
    "What should I pack for a weekend in Rome?",
    "I have a dog named Rex who hates the rain.",
    "Remind me to renew my passport next week.",
    "Can you suggest a simple dinner for tonight?",
]


def raw_speed(server, spec) -> dict[str, float]:
    """Prompt and generation tokens per second on one fixed request (after a warm-up)."""
    body = {
        "model": spec.alias,
        "messages": [{"role": "user", "content": "Summarize this in one line. " + "The harbour of Haifa is busy. " * 140}],
        "max_tokens": 64,
        "temperature": 0,
    }
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=900) as client:
        client.post("/chat/completions", json={**body, "max_tokens": 1})  # warm-up (weights paged in)
        body["messages"][0]["content"] += " Thanks."  # a new prompt, not a cache hit
        started = time.perf_counter()
        usage = client.post("/chat/completions", json=body).json()["usage"]
        total = time.perf_counter() - started
    # The server log has the split (llama_perf_context_print); the total is what a caller waits.
    log = server.log().splitlines()
    prompt_ms = [line for line in log if "prompt eval time" in line][-1]
    eval_ms = [line for line in log if " eval time" in line and "prompt" not in line][-1]
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "seconds": total,
        "prompt_tps": _tps(prompt_ms),
        "generation_tps": _tps(eval_ms),
    }


def _tokens_read(line: str) -> int:
    """N of llama.cpp's "prompt eval time = X ms / N tokens (...)"."""
    return int(line.split("/")[1].split("tokens")[0])


def _tps(line: str) -> float:
    return float(line.split("(")[1].split("tokens per second")[0].split(",")[-1])


async def run(model_key: str, turns: int, threads: int | None) -> None:
    import pgserver

    from app.local.model_server import MODELS, assemble_model, runtime_installed, start_server
    from graph.assembly import compile_graph
    from core.context import Context
    from llm.chat_model import load_chat_model
    from llm.structured import configured_method, remembered_mode
    from memory.backend import open_memory

    if not runtime_installed():
        raise SystemExit("llama-cpp-python is not installed: run `memory-agent local prepare` first")
    spec = MODELS[model_key]
    load_before = os.getloadavg()
    started = time.perf_counter()
    server = start_server(spec, assemble_model(spec), threads=threads)
    load_seconds = time.perf_counter() - started
    directory = tempfile.mkdtemp(prefix="ma-bench-llm-")
    pg = pgserver.get_server(directory, cleanup_mode="delete")
    try:
        speed = raw_speed(server, spec)
        os.environ.update(server.env())
        async with open_memory(pg.get_uri()) as backend:
            graph = compile_graph(backend.checkpointer, backend.store)
            ctx = Context(user_id=f"bench-{uuid.uuid4().hex[:6]}", model=server.model_name)
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            per_node: dict[str, list[float]] = defaultdict(list)
            per_turn: list[float] = []
            first_token: list[float] = []
            until_reply: list[float] = []
            calls: list[int] = []
            for i in range(turns):
                log_seen = len(server.log().splitlines())
                start = last = time.perf_counter()
                ttft = replied = None
                async for mode, chunk in graph.astream(
                    {"messages": [HumanMessage(MESSAGES[i % len(MESSAGES)])]}, config, context=ctx, stream_mode=["updates", "messages"]
                ):
                    now = time.perf_counter()
                    if mode == "messages":
                        message, meta = chunk
                        if ttft is None and meta.get("langgraph_node") == "reply" and str(message.content).strip():
                            ttft = now - start  # what the user waits for: the reply's first visible token
                        continue
                    for node in chunk:
                        per_node[node].append(now - last)
                        if node == "reply":
                            replied = now - start  # the whole reply (a terminal chat takes input from here on)
                    last = now
                per_turn.append(time.perf_counter() - start)
                first_token.append(ttft if ttft is not None else float("nan"))
                until_reply.append(replied if replied is not None else float("nan"))
                state = await graph.aget_state(config)
                if state.interrupts:  # a task change asks for confirmation: decline, as a user might
                    from langgraph.types import Command

                    async for _ in graph.astream(Command(resume={"approved": False}), config, context=ctx):
                        pass
                usage = (await graph.aget_state(config)).values.get("turn_usage") or {}
                calls.append(usage.get("model_calls", 0))
                # Tokens the server read per call this turn (llama.cpp's own count): the prompt cache at work.
                read = [_tokens_read(line) for line in server.log().splitlines()[log_seen:] if "prompt eval time" in line]
                print(
                    f"turn {i + 1}: first token {first_token[-1]:.1f} s, reply done {until_reply[-1]:.1f} s, "
                    f"whole turn {per_turn[-1]:.1f} s (load {os.getloadavg()[0]:.1f}); prompt tokens read per call: {read}",
                    flush=True,
                )
            mode = remembered_mode(load_chat_model(server.model_name)) or f"{configured_method()} (no refusal)"
    finally:
        server.stop()
        pg.cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"load average before: {load_before[0]:.1f}, after: {os.getloadavg()[0]:.1f}")
    print(f"model: Qwen2.5-Coder-{spec.key.upper()}-Instruct Q4_K_M, llama-cpp-python server, threads: {threads or 'default'}")
    print(f"server start: {load_seconds:.1f} s")
    print(
        f"raw speed: {speed['prompt_tokens']} prompt tokens + {speed['completion_tokens']} generated in {speed['seconds']:.1f} s; "
        f"prompt {speed['prompt_tps']:.0f} tok/s, generation {speed['generation_tps']:.1f} tok/s"
    )
    print(f"structured output mode the server needed: {mode}")
    print(f"turns: {turns}; reply-node model calls per turn: {calls}")
    print(f"per turn: median {statistics.median(per_turn):.1f} s, max {max(per_turn):.1f} s")
    later = slice(2, None)  # from the third turn on: the server's prompt cache has something to reuse
    if per_turn[later]:
        print(
            f"from turn 3: first token median {statistics.median(first_token[later]):.1f} s, "
            f"whole turn median {statistics.median(per_turn[later]):.1f} s"
        )
    for node, values in per_node.items():
        print(f"  {node:18s} median {statistics.median(values):6.1f} s   max {max(values):6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["0.5b", "1.5b"], default="0.5b")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: one per core)")
    args = parser.parse_args()
    asyncio.run(run(args.model, args.turns, args.threads))


if __name__ == "__main__":
    main()
