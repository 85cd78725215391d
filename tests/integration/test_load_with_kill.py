"""Chats under load while a worker is SIGKILLed, at a small size: the code of
``benchmarks/load_with_kill.py`` (whose full size, 50 clients × 5 turns, gives the
figures in benchmarks/README.md) against `memory-agent serve` with 2 workers on the
offline model and a real embedded Postgres.

What must hold: every turn a client saw ``done`` for is stored (message and reply, with
the ids ``done`` named); every stored turn is a sent one and none is stored twice; every
failed turn's message is stored (kept as a stopped turn, or complete when the worker
died in the memory phase) or was given back to the client; and no chat is held by the
dead worker 30 s after the kill.
"""

from __future__ import annotations

import pytest

from benchmarks.load_with_kill import FREED_WITHIN_SECONDS, run_load
from tests.support.http_server import running_server

pytestmark = pytest.mark.slow  # servers and a killed worker


async def test_a_worker_killed_under_load_loses_no_acknowledged_turn_stores_nothing_twice_and_frees_its_chats(new_database):
    with running_server(new_database("loadkill"), model="offline", workers=2) as server:
        report = await run_load(server, users=3, clients=12, turns=3, kill_at=0.3)
    print("\n" + report.table())

    assert report.dead_runs_taken_back > 0, "the kill hit no run in flight"
    assert report.acknowledged > 0 and report.acknowledged_stored == report.acknowledged
    kept = report.failed_kept_stopped + report.failed_kept_complete
    assert report.stored_turns == report.acknowledged + kept and report.stored_unaccounted == 0
    assert report.duplicated_messages == 0
    assert report.failed_lost == [], [(t.client, t.index, t.outcome) for t in report.failed_lost]
    assert report.held_30s_after_kill == 0, f"chats still held {FREED_WITHIN_SECONDS:.0f} s after the kill"
    assert report.chats_running_at_end == 0
