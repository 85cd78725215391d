"""The pool's check of the connections it hands out (storage.postgres.check_connection): a round
trip only when the server may have closed the connection, and a closed one never handed out."""

from __future__ import annotations

import pytest

import psycopg
from psycopg_pool import AsyncConnectionPool

from storage.postgres import open_pool


@pytest.mark.slow
async def test_a_live_connection_is_handed_out_without_a_round_trip(new_database, monkeypatch) -> None:
    checks: list[object] = []
    full_check = AsyncConnectionPool.check_connection

    async def counted(conn):
        checks.append(conn)
        await full_check(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", counted)
    pool = await open_pool(new_database("pool"), max_size=1)
    try:
        for _ in range(3):
            async with pool.connection() as conn:
                assert (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"] == 1
        assert checks == []
    finally:
        await pool.close()


@pytest.mark.slow
async def test_a_connection_the_server_closed_is_replaced_before_use(new_database) -> None:
    url = new_database("pool")
    pool = await open_pool(url, max_size=1)
    try:
        async with pool.connection() as conn:
            before = (await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (before,))  # waits until it has exited
        async with pool.connection() as conn:  # not the dead one: no error reaches the caller
            after = (await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
        assert after != before
    finally:
        await pool.close()
