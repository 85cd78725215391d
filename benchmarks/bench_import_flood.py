"""Imports that flood a worker (issue 31's figures): worker memory for a large body, and another
user's ``GET /me`` while big imports run.

    python -m benchmarks.bench_import_flood [--repo PATH] [--imports 4] [--database-url URL]

Against `memory-agent serve` (offline model) on a throwaway embedded Postgres; ``--repo`` serves
another checkout's code (e.g. a worktree of an older commit) for a before/after in one run.

1. **Memory**: one worker; its peak RSS (``VmHWM``, reset through ``/proc/PID/clear_refs``)
   while it takes (a) a 28 MB body of 470,000 tiny messages whose last one is empty (the attack
   run's: refused, after how much work?), and (b) a maximal valid import (32 MB, 5,000 messages
   of ~6,300 characters), until its chat is listed as being imported (then it is deleted).
2. **Latency**: two workers; another user's ``GET /me`` timed every 0.1 s with no import (the
   loaded machine's baseline), then while ``--imports`` users each send body (a) at once, then
   each body (b).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

import httpx

import tests.support.http_server as http_server
from tests.support.http_server import LiveServer, create_keys, new_user, running_server

TINY_MESSAGES = 470_000
MAX_MESSAGES, MAX_BYTES = 5_000, 32_000_000


def machine() -> str:
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load average {load}"


def tiny_body() -> bytes:
    tiny = {"role": "user", "text": "a", "time": "2024-01-01T00:00:00Z"}
    return json.dumps({"messages": [tiny] * (TINY_MESSAGES - 1) + [{**tiny, "text": ""}]}).encode()


def maximal_body() -> bytes:
    text = ("word " * 2_000)[:6_300]
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "text": f"{i} {text}", "time": f"2024-01-01T00:00:00Z"} for i in range(MAX_MESSAGES)
    ]
    body = json.dumps({"messages": messages}).encode()
    assert len(body) <= MAX_BYTES, len(body)
    return body


def rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


async def wait_listed(client: httpx.AsyncClient, timeout: float = 600) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chats = (await client.get("/chats")).json().get("chats", [])
        if chats:
            return chats[0]["id"]
        await asyncio.sleep(0.2)
    return None


async def settled(post: asyncio.Task, timeout: float = 30) -> httpx.Response | None:
    """The import's answer, or None when it did not come within ``timeout`` (an import that deleting
    its chat did not stop runs on; the request is given up)."""
    done, _ = await asyncio.wait({post}, timeout=timeout)
    if not done:
        post.cancel()
        return None
    return post.result() if post.exception() is None else None


def answer_of(response: httpx.Response | None) -> str:
    """The status, with the error's code and words for a server error (its cause is in the server's log)."""
    if response is None:
        return "none"
    if response.status_code >= 500:
        return f"{response.status_code} ({response.text[:200]})"
    return str(response.status_code)


async def memory_case(server: LiveServer, name: str, body: bytes, expect_import: bool) -> str:
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=900) as client:
        pid = int((await client.get("/healthz")).headers["x-worker-pid"])
        before = rss_kb(pid, "VmRSS")
        reset_peak(pid)
        started = time.monotonic()
        post = asyncio.create_task(client.post("/chats/import", content=body))
        outcome = ""
        if expect_import:
            listed = asyncio.create_task(wait_listed(client))
            done, _ = await asyncio.wait({post, listed}, return_when=asyncio.FIRST_COMPLETED)
            if listed in done and listed.result():
                await asyncio.sleep(2)  # the import under way: its exchanges' memory counts too
                outcome = "importing"
                peak = rss_kb(pid, "VmHWM")
                await client.delete(f"/chats/{listed.result()}")
            response = await settled(post)
            answer = str(response.status_code) if response is not None else "no answer 30 s after the deletion"
            outcome = f"{outcome}, deleted, then {answer}" if outcome else answer
        else:
            response = await post
            outcome = f"{response.status_code} {response.json().get('error', {}).get('code', '')}"
        seconds = time.monotonic() - started
        peak = rss_kb(pid, "VmHWM") if not expect_import or "importing" not in outcome else peak
    grew = (peak - before) / 1024
    return f"{name:<34} {len(body) / 1e6:6.1f} MB  peak +{grew:7.0f} MB ({grew * 1024 * 1024 / len(body):4.1f}x the body)  {outcome} after {seconds:.1f} s"


async def latency_case(server: LiveServer, name: str, body: bytes | None, imports: int, watch_seconds: float) -> str:
    users = [new_user() for _ in range(imports + 1)]
    keys = await create_keys(server.database_url, users)
    watcher_key, importer_keys = keys[users[0]], [keys[u] for u in users[1:]]
    times: list[float] = []
    clients = [httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {k}", "Content-Type": "application/json"}, timeout=900) for k in importer_keys]
    try:
        posts = [asyncio.create_task(c.post("/chats/import", content=body)) for c in clients] if body is not None else []
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {watcher_key}"}, timeout=120, limits=httpx.Limits(max_keepalive_connections=0)) as watcher:
            deadline = time.monotonic() + watch_seconds
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                assert (await watcher.get("/me")).status_code == 200
                times.append(time.perf_counter() - t0)
                await asyncio.sleep(0.1)
        # Maximal valid imports would run for long: delete their chats (the imports stop).
        for c in clients:
            for chat in (await c.get("/chats")).json().get("chats", []):
                await c.delete(f"/chats/{chat['id']}")
        answers = [await settled(p) for p in posts]
        statuses = [answer_of(r) for r in answers]
    finally:
        for c in clients:
            await c.aclose()
    times.sort()
    return (
        f"{name:<34} GET /me x{len(times)}: p50 {statistics.median(times) * 1000:6.0f} ms, p95 {times[int(len(times) * 0.95) - 1] * 1000:6.0f} ms, "
        f"max {times[-1] * 1000:6.0f} ms; imports answered {' '.join(sorted(statuses))}"
    )


async def main_async(args) -> None:
    from tests.support.embedded_postgres import on_database

    if args.repo:
        http_server.REPO_ROOT = Path(args.repo).resolve()  # start_server runs `serve` from there
    print(f"code: {http_server.REPO_ROOT}")
    print(f"before: {machine()}", flush=True)
    tiny, maximal = tiny_body(), maximal_body()

    async def against(url: str) -> None:
        if args.only in (None, "memory"):
            with running_server(url, workers=1, timeout=600) as server:
                print(await memory_case(server, "470,000 tiny messages (last empty)", tiny, expect_import=False), flush=True)
                print(await memory_case(server, "maximal valid import", maximal, expect_import=True), flush=True)
        if args.only == "memory":
            print(f"after: {machine()}")
            return
        with running_server(url, workers=2, timeout=600) as server:
            print(await latency_case(server, "no import (the machine's baseline)", None, 0, args.watch), flush=True)
            print(await latency_case(server, f"{args.imports} x 470,000 tiny messages", tiny, args.imports, args.watch), flush=True)
            print(await latency_case(server, f"{args.imports} x maximal valid import", maximal, args.imports, args.watch), flush=True)
        print(f"after: {machine()}")

    await on_database(args.database_url, "ma-flood-", against)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", help="serve this checkout's code (default: this one)")
    parser.add_argument("--imports", type=int, default=4)
    parser.add_argument("--watch", type=float, default=30.0, help="seconds GET /me is timed during each latency case")
    parser.add_argument("--only", choices=["memory", "latency"], help="one of the two parts")
    parser.add_argument("--database-url", help="a database to use (default: a throwaway embedded Postgres)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
