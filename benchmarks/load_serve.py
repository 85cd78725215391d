"""Many users chatting with `memory-agent serve` at once (issue 27's load bench; not a pytest test).

    python -m benchmarks.load_serve [--concurrency 1,50,200] [--turns 3] [--think 0] [--history 0] [--model offline] [--workers 2]

For each concurrency N: N users (a key and a chat each) send ``--turns`` messages one after the
other over HTTP to one `memory-agent serve` on 127.0.0.1 (a throwaway embedded Postgres, the
offline model). With ``--think 0`` (the default) each sends its next message the moment its reply
is done, and all N send their first at the same instant: a burst, the machine saturated. With
``--think S`` each user first pauses, as a person reads and types, a random time of mean S seconds
(exponential, the same for a given user and S in every run) before each message, the first
included, so the users also start spread out. With ``--history H`` each user has first sent H
messages on its chat (untimed, before the clock starts), so the measured turns search a memory:
a new user's first turn has nothing to search and embeds nothing. A 409 (the chat still busy with the memory step of the turn
before) is sent again every 0.2 s, as the page would. Bounded: N × turns requests, each with a
timeout. Reported per N: turns per second, time to the first ``token`` event (p50/p95) and the
whole turn's (p50/p95), and the CPU the whole machine spent per turn (server, Postgres and this
client together: a figure a noisy machine moves less than the times); then every chat is read back through the API and checked: each message
sent is stored exactly once, in order, with its reply, and the ids ``done`` named are those stored
(none lost, none duplicated).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import time
import uuid
from collections import Counter

import httpx

from tests.support.http_server import LiveServer, aparse_events, create_keys, new_user, running_server

BUSY_RETRY_SECONDS = 120.0


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every process: the server, Postgres, this client)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else float("nan")


async def one_turn(client: httpx.AsyncClient, chat_id: str, text: str) -> dict:
    busy_until = time.monotonic() + BUSY_RETRY_SECONDS
    while True:
        started = time.perf_counter()
        first = None
        done = None
        async with client.stream("POST", f"/chats/{chat_id}/messages", json={"text": text}) as response:
            if response.status_code == 409 and time.monotonic() < busy_until:
                await response.aread()
                await asyncio.sleep(0.2)
                continue
            if response.status_code != 200:
                return {"error": f"http {response.status_code}: {(await response.aread())[:200]!r}"}
            async for event in aparse_events(response.aiter_lines()):
                if event.name == "token" and first is None:
                    first = time.perf_counter() - started
                if event.name in ("done", "error", "interrupt"):
                    done = event
        if done is None or done.name != "done":
            return {"error": f"ended with {done.name if done else 'nothing'}: {done.data if done else ''}"}
        return {"ttft": first if first is not None else time.perf_counter() - started, "turn": time.perf_counter() - started, "done": done.data}


def pauses(user: int, turns: int, think: float) -> list[float]:
    """The seconds user number ``user`` thinks before each of its ``turns`` messages (mean ``think``)."""
    rng = random.Random(user)
    return [rng.expovariate(1 / think) if think > 0 else 0.0 for _ in range(turns)]


async def user_session(client: httpx.AsyncClient, chat_id: str, texts: list[str], results: list[dict], waits: list[float]) -> None:
    for text, pause in zip(texts, waits):
        if pause:
            await asyncio.sleep(pause)
        results.append(await one_turn(client, chat_id, text) | {"text": text})


async def check(server: LiveServer, key: str, chat_id: str, texts: list[str], results: list[dict]) -> tuple[int, int]:
    """(lost, duplicated) messages of the chat, read back through the API."""
    async with server.async_client(key) as client:
        response = await client.get(f"/chats/{chat_id}")
        response.raise_for_status()
        messages = response.json()["messages"]
    users = [m for m in messages if m["role"] == "user"]
    counts = Counter(m["content"] for m in users)
    duplicated = sum(n - 1 for n in counts.values())
    lost = sum(counts[t] == 0 for t in texts)
    by_id = {m["id"]: m for m in messages}
    for r in results:
        done = r.get("done")
        if done and (by_id.get(done["user_message_id"], {}).get("content") != r["text"] or done["message_id"] not in by_id):
            lost += 1
    if [m["content"] for m in users] != [t for t in texts if counts[t]]:
        lost += 1  # out of order counts as a loss of the conversation's shape
    return lost, duplicated


async def level(server: LiveServer, concurrency: int, turns: int, think: float = 0.0, history: int = 0) -> dict:
    names = [new_user() for _ in range(concurrency)]
    keys = await create_keys(server.database_url, names)
    chats = []
    for name in names:
        async with server.async_client(keys[name]) as client:
            response = await client.post("/chats", json={})
            response.raise_for_status()
            chats.append(response.json()["chat"]["id"])
    texts = [[f"User {u} says hello, message {i}: tell me about rivers and bees ({uuid.uuid4().hex[:6]})" for i in range(history + turns)] for u in range(concurrency)]
    results: list[list[dict]] = [[] for _ in range(concurrency)]
    async with contextlib.AsyncExitStack() as stack:
        # Each user's client is ready before the clock starts, as a page that has loaded is.
        clients = [await stack.enter_async_context(server.async_client(keys[n], timeout=300)) for n in names]
        if history:  # what each user said before: untimed, and not among the results
            earlier: list[list[dict]] = [[] for _ in range(concurrency)]
            await asyncio.gather(*(user_session(cl, c, t[:history], r, [0.0] * history) for cl, c, t, r in zip(clients, chats, texts, earlier)))
            if failed := [r["error"] for rs in earlier for r in rs if "error" in r]:
                raise RuntimeError(f"the users' earlier messages failed: {failed[:3]}")
        load_before = os.getloadavg()
        cpu_before = machine_cpu_seconds()
        client_before = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(
            *(user_session(cl, c, t[history:], r, pauses(u, turns, think)) for u, (cl, c, t, r) in enumerate(zip(clients, chats, texts, results)))
        )
        elapsed = time.perf_counter() - started
        cpu_used = machine_cpu_seconds() - cpu_before
        client_used = time.process_time() - client_before
    lost = duplicated = 0
    for n, c, t, r in zip(names, chats, texts, results):
        lo, du = await check(server, keys[n], c, t, r)
        lost, duplicated = lost + lo, duplicated + du
    ok = [r for rs in results for r in rs if "done" in r]
    errors = [r["error"] for rs in results for r in rs if "error" in r]
    return {
        "concurrency": concurrency, "think_s": think, "history": history, "turns": concurrency * turns, "completed": len(ok), "errors": errors[:5], "error_count": len(errors),
        "seconds": round(elapsed, 1), "turns_per_s": round(len(ok) / elapsed, 2),
        # Less moved by a noisy machine than the times: the CPU a turn took, whoever spent it.
        "machine_cpu_ms_per_turn": round(1000 * cpu_used / len(ok), 1) if ok else None,
        "client_cpu_ms_per_turn": round(1000 * client_used / len(ok), 1) if ok else None,
        "ttft_s": {"p50": round(statistics.median([r["ttft"] for r in ok]), 3), "p95": round(pct([r["ttft"] for r in ok], 0.95), 3)} if ok else None,
        "turn_s": {"p50": round(statistics.median([r["turn"] for r in ok]), 3), "p95": round(pct([r["turn"] for r in ok], 0.95), 3)} if ok else None,
        # By the user's message number: in a burst every user's first message arrives at once, and
        # the first tokens of those wait for one another (the p95 above is mostly theirs).
        "ttft_by_message_s": {
            str(i + 1): {"p50": round(statistics.median(t), 3), "p95": round(pct(t, 0.95), 3), "max": round(max(t), 3)}
            for i in range(turns)
            if (t := [rs[i]["ttft"] for rs in results if len(rs) > i and "done" in rs[i]])
        },
        "lost": lost, "duplicated": duplicated, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }


async def main_async(args) -> list[dict]:
    from tests.support.embedded_postgres import throwaway_database

    out = []
    with throwaway_database("ma-serve-load-") as url:
        with running_server(url, model=args.model, workers=args.workers, timeout=900) as server:
            for n in [int(c) for c in args.concurrency.split(",")]:
                result = await level(server, n, args.turns, args.think, args.history)
                out.append(result)
                print(json.dumps(result), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,50,200", help="numbers of users chatting at once, one level after the other")
    parser.add_argument("--turns", type=int, default=3, help="messages each user sends, one after the other")
    parser.add_argument("--think", type=float, default=0.0, help="mean seconds a user pauses before each message (0: none, a burst)")
    parser.add_argument("--history", type=int, default=0, help="messages each user sends first, untimed (0: new users, whose first turn has nothing to search)")
    parser.add_argument("--model", default="offline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    results = asyncio.run(main_async(args))
    print(f"think time: mean {args.think:g} s before each message" if args.think else "think time: none (each user's next message as soon as its reply is done)")
    print(f"history: each user sent {args.history} messages before the clock started" if args.history else "history: none (new users)")
    print(f"{'users':>6} {'turns/s':>8} {'ttft p50':>9} {'ttft p95':>9} {'turn p95':>9} {'cpu ms/turn':>12} {'lost':>5} {'dup':>4} {'errors':>6}")
    for r in results:
        t, w = r["ttft_s"] or {}, r["turn_s"] or {}
        print(f"{r['concurrency']:>6} {r['turns_per_s']:>8} {t.get('p50', float('nan')):>9} {t.get('p95', float('nan')):>9} "
              f"{w.get('p95', float('nan')):>9} {r['machine_cpu_ms_per_turn']:>12} {r['lost']:>5} {r['duplicated']:>4} {r['error_count']:>6}")
    for r in results:
        by = ", ".join(f"message {n}: {v['p50']} / {v['p95']} / {v['max']}" for n, v in r["ttft_by_message_s"].items())
        print(f"{r['concurrency']:>6} users, first token p50 / p95 / max (s) by each user's message: {by}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
