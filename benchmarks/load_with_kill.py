"""Chats under load with one worker killed mid-run (issue 9's figure).

    python -m benchmarks.load_with_kill [--users 10] [--clients 50] [--turns 5] [--kill-at 0.4]
                                        [--model offline] [--workers 2] [--database-url URL]

``--clients`` clients (each a chat of its own, spread over ``--users`` users) send
``--turns`` messages each, one after the other, all clients at once, to `memory-agent
serve` with ``--workers`` uvicorn workers on the offline model. When ``--kill-at`` of all
turns are acknowledged, the worker with the most runs in flight gets SIGKILL (uvicorn
starts a new one). A client whose stream breaks goes on with its next message; a 409 (a
run still holds the chat) is sent again every 0.5 s for up to ``BUSY_RETRY_SECONDS``, as a
user would.

Then, read back through the API (and the runs table for the reaper):

- acknowledged turns (the client saw ``done``) are all stored: the user's message and
  the reply, with the ids ``done`` named;
- every stored turn is an acknowledged one or a failed one kept (its message, and the
  reply as far as it got marked stopped, or complete when the worker died in the memory
  phase); no message is stored twice;
- every failed turn's message is stored, or came back to the client (an ``error`` event
  with its ``text``, or an HTTP error that stored nothing);
- no chat is still held by a run of before the kill 30 s after it (counted in the runs
  table, without touching the chats, so only the live worker's reaper and the clients'
  own messages can have freed them).

Without ``--database-url`` a throwaway embedded Postgres is used. The same code runs at a
small size in ``tests/integration/test_load_with_kill.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import psycopg

from tests.support.http_server import LiveServer, aparse_events, create_keys, new_user, running_server

BUSY_RETRY_SECONDS = 60.0
FREED_WITHIN_SECONDS = 30.0
TOPICS = ["rivers", "stars", "trains", "bees", "bread", "maps", "tides"]


@dataclass
class Turn:
    client: int
    index: int
    text: str
    outcome: str = ""  # done | error <code> | http <status> | connection lost … (before an answer, after 200, mid-reply) | no end event
    done: dict | None = None
    error: dict | None = None
    busy_retries: int = 0

    @property
    def returned(self) -> bool:
        """The client was given the message back: an ``error`` event carrying its text, an HTTP
        error (the request stored nothing), or no answer at all (a request the server never
        answered was not taken: the page puts the text back in the box)."""
        if self.outcome.startswith("http ") or self.outcome == "connection lost before an answer":
            return True
        return self.error is not None and self.error.get("text") == self.text


@dataclass
class Kill:
    pid: int
    worker: str
    at: float  # time.monotonic()
    db_time: object  # the database's clock at the kill
    acknowledged_before: int
    runs: dict[str, int]  # the worker's active runs at the kill, by status


@dataclass
class Report:
    users: int
    clients: int
    turns_per_client: int
    elapsed: float
    kill: Kill
    turns: list[Turn]
    acknowledged: int = 0
    acknowledged_stored: int = 0
    stored_turns: int = 0
    stored_unaccounted: int = 0  # stored turns that match no sent message
    failed_kept_stopped: int = 0
    failed_kept_complete: int = 0
    failed_returned: int = 0
    failed_lost: list[Turn] = field(default_factory=list)  # neither stored nor returned
    duplicated_messages: int = 0
    chats_running_at_end: int = 0
    held_30s_after_kill: int = -1  # runs of before the kill (or their take-backs) still active then
    dead_runs_taken_back: int = 0
    last_taken_back_after: float | None = None  # seconds after the kill
    busy_retries: int = 0

    @property
    def failed(self) -> list[Turn]:
        return [t for t in self.turns if t.done is None]

    def table(self) -> str:
        seen = Counter(t.outcome for t in self.failed)
        rows = [
            ("clients × turns (users)", f"{self.clients} × {self.turns_per_client} ({self.users})"),
            ("turns sent", len(self.turns)),
            ("acknowledged (the client saw `done`)", self.acknowledged),
            ("acknowledged and stored (message + reply, the ids `done` named)", self.acknowledged_stored),
            ("stored turns in the chats' histories", self.stored_turns),
            ("stored turns matching no sent message", self.stored_unaccounted),
            ("duplicated messages", self.duplicated_messages),
            ("failed turns", len(self.failed)),
            *((f"  … the client saw: {outcome}", n) for outcome, n in sorted(seen.items())),
            ("  … kept: message + reply so far, marked stopped", self.failed_kept_stopped),
            ("  … kept: message + complete reply (worker died in the memory phase)", self.failed_kept_complete),
            ("  … not stored, message returned to the client", self.failed_returned),
            ("  … neither stored nor returned", len(self.failed_lost)),
            ("worker killed after … acknowledged turns", self.kill.acknowledged_before),
            ("its runs in flight (by status)", ", ".join(f"{k} {v}" for k, v in sorted(self.kill.runs.items())) or "none"),
            ("dead runs taken back by the live worker", self.dead_runs_taken_back),
            ("last one taken back (s after the kill)", "—" if self.last_taken_back_after is None else f"{self.last_taken_back_after:.1f}"),
            (f"chats still held {FREED_WITHIN_SECONDS:.0f} s after the kill", self.held_30s_after_kill),
            ("chats `running` at the end", self.chats_running_at_end),
            ("409 answers sent again", self.busy_retries),
            ("wall time (s)", f"{self.elapsed:.1f}"),
        ]
        width = max(len(str(k)) for k, _ in rows)
        return "\n".join(f"{str(k).ljust(width)}  {v}" for k, v in rows)


# --------------------------------------------------------------------------- clients
def turn_text(client: int, index: int) -> str:
    return f"Client {client}, message {index}: what is a good book about {TOPICS[(client + index) % len(TOPICS)]}?"


async def send(client: httpx.AsyncClient, chat_id: str, turn: Turn) -> None:
    busy_until = time.monotonic() + BUSY_RETRY_SECONDS
    while True:
        events, answered = [], False
        try:
            async with client.stream("POST", f"/chats/{chat_id}/messages", json={"text": turn.text}) as response:
                answered = True
                if response.status_code != 200:
                    body = await response.aread()
                    if response.status_code == 409 and time.monotonic() < busy_until:
                        turn.busy_retries += 1
                        await asyncio.sleep(0.5)
                        continue
                    turn.outcome, turn.error = f"http {response.status_code}", {"body": body.decode(errors="replace")[:300]}
                    return
                async for event in aparse_events(response.aiter_lines()):
                    events.append(event)
        except httpx.TransportError:
            if not answered:  # no answer at all: the message is the client's still (the page puts it back in the box)
                turn.outcome = "connection lost before an answer"
            else:
                turn.outcome = "connection lost mid-reply" if events else "connection lost after 200, before any event"
            return
        end = events[-1] if events else None
        if end is None or end.name not in ("done", "error", "interrupt"):
            turn.outcome = "no end event"
        elif end.name == "done":
            turn.outcome, turn.done = "done", end.data
        else:
            turn.outcome, turn.error = f"{end.name} {end.data.get('code', '')}".strip(), end.data
        return


async def chat_client(server: LiveServer, key: str, chat_id: str, turns: list[Turn], acknowledged: list[int]) -> None:
    # A new connection per message, as after a page load: a message is never sent on a kept-alive
    # connection to the dead worker (which breaks before any byte reaches a live one).
    async with server.async_client(key, timeout=120, fresh_connections=True) as client:
        for turn in turns:
            await send(client, chat_id, turn)
            if turn.done is not None:
                acknowledged[0] += 1


# --------------------------------------------------------------------------- the kill
async def active_runs_by_worker(database_url: str) -> dict[str, Counter]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        rows = await (
            await conn.execute("SELECT worker, status FROM memory_agent_runs WHERE status IN ('running', 'stopping', 'committing')")
        ).fetchall()
    found: dict[str, Counter] = {}
    for worker, status in rows:
        found.setdefault(worker, Counter())[status] += 1
    return found


async def kill_a_worker(server: LiveServer, acknowledged: list[int], at: int, clients_done: asyncio.Event) -> Kill:
    """Once ``at`` turns are acknowledged: SIGKILL the worker with the most runs in flight."""
    while acknowledged[0] < at and not clients_done.is_set():
        await asyncio.sleep(0.02)
    host = socket.gethostname()
    while True:
        active = await active_runs_by_worker(server.database_url)
        candidates = [(sum(active.get(f"{host}:{pid}", Counter()).values()), pid) for pid in server.worker_pids]
        busiest, pid = max(candidates)
        if busiest or clients_done.is_set():
            break
        await asyncio.sleep(0.02)
    async with await psycopg.AsyncConnection.connect(server.database_url, autocommit=True) as conn:
        db_time = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]
    os.kill(pid, signal.SIGKILL)
    return Kill(pid, f"{host}:{pid}", time.monotonic(), db_time, acknowledged[0], dict(active.get(f"{host}:{pid}", {})))


async def held_after(database_url: str, kill: Kill) -> int:
    """Chats still held because of the kill: the dead worker's runs, or take-backs of them, still active."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        return (
            await (
                await conn.execute(
                    "SELECT count(*) FROM memory_agent_runs WHERE status IN ('running', 'stopping', 'committing') "
                    "AND (worker = %s OR kind = 'recover')",
                    (kill.worker,),
                )
            ).fetchone()
        )[0]


async def kill_and_watch(server: LiveServer, acknowledged: list[int], at: int, clients_done: asyncio.Event) -> tuple[Kill, int]:
    """The kill, and how many chats it still held ``FREED_WITHIN_SECONDS`` later (counted in the
    runs table while the clients go on, without reading the chats: reading a chat through the
    API takes a dead run back itself)."""
    kill = await kill_a_worker(server, acknowledged, at, clients_done)
    await asyncio.sleep(max(0.0, kill.at + FREED_WITHIN_SECONDS - time.monotonic()))
    return kill, await held_after(server.database_url, kill)


# --------------------------------------------------------------------------- the run
async def run_load(server: LiveServer, *, users: int, clients: int, turns: int, kill_at: float = 0.4) -> Report:
    """Run the load, kill a worker on the way, wait past the reaper, and check what was kept."""
    names = [new_user() for _ in range(users)]
    keys = await create_keys(server.database_url, names)
    owner = [names[c % users] for c in range(clients)]
    chats: list[str] = []
    for c in range(clients):
        async with server.async_client(keys[owner[c]]) as client:
            response = await client.post("/chats", json={})
            response.raise_for_status()
            chats.append(response.json()["chat"]["id"])
    plan = [[Turn(c, i, turn_text(c, i)) for i in range(turns)] for c in range(clients)]

    acknowledged = [0]
    clients_done = asyncio.Event()
    started = time.perf_counter()
    watcher = asyncio.create_task(kill_and_watch(server, acknowledged, max(1, int(kill_at * clients * turns)), clients_done))
    await asyncio.gather(*(chat_client(server, keys[owner[c]], chats[c], plan[c], acknowledged) for c in range(clients)))
    elapsed = time.perf_counter() - started
    clients_done.set()
    kill, held = await watcher

    report = Report(users, clients, turns, elapsed, kill, [t for p in plan for t in p])
    report.held_30s_after_kill = held
    async with await psycopg.AsyncConnection.connect(server.database_url, autocommit=True) as conn:
        report.dead_runs_taken_back = (
            await (await conn.execute("SELECT count(*) FROM memory_agent_runs WHERE worker = %s AND status = 'abandoned'", (kill.worker,))).fetchone()
        )[0]
        last = (
            await (await conn.execute("SELECT max(finished_at) FROM memory_agent_runs WHERE kind = 'recover' AND started_at >= %s", (kill.db_time,))).fetchone()
        )[0]
    if last is not None:
        report.last_taken_back_after = (last - kill.db_time).total_seconds()

    await check_histories(server, report, keys, owner, chats, plan)
    return report


async def check_histories(server: LiveServer, report: Report, keys: dict, owner: list[str], chats: list[str], plan: list[list[Turn]]) -> None:
    report.acknowledged = sum(t.done is not None for t in report.turns)
    report.busy_retries = sum(t.busy_retries for t in report.turns)
    for c, chat_id in enumerate(chats):
        async with server.async_client(keys[owner[c]]) as client:
            response = await client.get(f"/chats/{chat_id}")
            response.raise_for_status()
            detail = response.json()
        report.chats_running_at_end += bool(detail["running"])
        messages = detail["messages"]
        by_id = {m["id"]: m for m in messages}
        user_texts = Counter(m["content"] for m in messages if m["role"] == "user")
        report.duplicated_messages += sum(n - 1 for n in user_texts.values()) + (len(messages) - len(by_id))
        # Stored turns: a user message and the reply after it.
        stored: dict[str, dict] = {}
        for i, m in enumerate(messages):
            if m["role"] == "user" and i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
                stored[m["content"]] = messages[i + 1]
        report.stored_turns += len(stored)
        sent = {t.text: t for t in plan[c]}
        report.stored_unaccounted += sum(text not in sent for text in stored)
        for turn in plan[c]:
            if turn.done is not None:
                human, reply = by_id.get(turn.done["user_message_id"]), by_id.get(turn.done["message_id"])
                if human and reply and human["content"] == turn.text and stored.get(turn.text) is reply and not reply["stopped"]:
                    report.acknowledged_stored += 1
            elif turn.text in stored:
                if stored[turn.text]["stopped"]:
                    report.failed_kept_stopped += 1
                else:
                    report.failed_kept_complete += 1
            elif turn.returned:
                report.failed_returned += 1
            else:
                report.failed_lost.append(turn)


def machine() -> str:
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load average {load}"


async def main_async(args) -> None:
    from tests.support.embedded_postgres import on_database

    async def against(url: str) -> Report:
        print(f"before: {machine()}", flush=True)
        with running_server(url, model=args.model, workers=args.workers) as server:
            report = await run_load(server, users=args.users, clients=args.clients, turns=args.turns, kill_at=args.kill_at)
        print(report.table())
        for turn in report.failed_lost:
            print(f"neither stored nor returned: client {turn.client} message {turn.index} ({turn.outcome})")
        print(f"after: {machine()}")
        return report

    await on_database(args.database_url, "ma-load-", against)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--kill-at", type=float, default=0.4, help="fraction of all turns acknowledged before the kill")
    parser.add_argument("--model", default="offline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--database-url", help="a database to use (default: a throwaway embedded Postgres)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
