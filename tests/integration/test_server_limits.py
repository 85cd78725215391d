"""`memory-agent serve` against clients that misbehave at the connection level (loopback only).

A client sending its headers a byte at a time, or a declared body a byte every few
seconds, is cut off within the server's deadlines (set to 2 s here) while others are
served; a body trickled faster than the idle deadline is cut off by the whole body's (4 s); an API key put in the query string is refused and never written to the access log.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.http_server import create_keys, new_user, start_server

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess and slow clients

DEADLINE = 2  # seconds: MEMORY_AGENT_HEADER_TIMEOUT and MEMORY_AGENT_BODY_IDLE_TIMEOUT of this server
BODY_DEADLINE = 4  # seconds: MEMORY_AGENT_BODY_TIMEOUT, a whole body's
SLOW_CLIENTS = 5
GIVE_UP_AFTER = 20  # seconds a slow client keeps trying; without deadlines it is never cut off


@pytest.fixture(scope="module")
def server(new_database):
    live = start_server(
        new_database("limits"),
        workers=1,
        log_level="info",
        env={
            "MEMORY_AGENT_HEADER_TIMEOUT": str(DEADLINE),
            "MEMORY_AGENT_BODY_IDLE_TIMEOUT": str(DEADLINE),
            "MEMORY_AGENT_BODY_TIMEOUT": str(BODY_DEADLINE),
        },
    )
    yield live
    live.stop()


async def trickle(url: str, head: bytes, body_piece: bytes | None, every: float) -> float | None:
    """Send ``head`` a byte every ``every`` s (or all of it, then ``body_piece`` every ``every`` s);
    the seconds until the server closed the connection, None if it was still open after GIVE_UP_AFTER."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    pieces = [head] if body_piece is not None else [bytes([b]) for b in head]
    try:
        while time.monotonic() - started < GIVE_UP_AFTER:
            writer.write(pieces.pop(0) if pieces else body_piece or b"")
            try:
                await writer.drain()
                data = await asyncio.wait_for(reader.read(4096), timeout=every)
            except asyncio.TimeoutError:
                continue  # still open, nothing said
            except ConnectionError:
                return time.monotonic() - started
            if data == b"" or data.startswith(b"HTTP/1.1 408"):
                return time.monotonic() - started
        return None
    finally:
        writer.close()


async def test_clients_sending_headers_or_a_body_a_byte_at_a_time_are_cut_off_while_others_are_served(server):
    url = server.url
    headers = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200 + b"\r\n\r\n"
    declared = b"POST /chats HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    slow_headers = [trickle(url, headers, None, every=0.5) for _ in range(SLOW_CLIENTS)]
    slow_bodies = [trickle(url, declared, b" ", every=DEADLINE + 1) for _ in range(SLOW_CLIENTS)]
    results = await asyncio.gather(*slow_headers, *slow_bodies)
    header_times, body_times = results[:SLOW_CLIENTS], results[SLOW_CLIENTS:]
    print(f"\nheader trickles cut after {header_times} s; body trickles after {body_times} s")
    assert all(t is not None and t < DEADLINE + 3 for t in header_times), header_times
    assert all(t is not None and t < 2 * DEADLINE + 4 for t in body_times), body_times
    with server.client(timeout=10) as client:
        assert client.get("/healthz").status_code == 200


async def test_a_key_in_the_query_string_is_refused_and_never_written_to_the_access_log(server):
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    with server.client(timeout=30) as client:
        refused = client.get("/chats", params={"api_key": key})
        assert refused.status_code == 401, refused.text
        assert client.get("/chats", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    log = ""
    for _ in range(50):  # the worker writes its access line after the response
        log = server.log()
        if "/chats?api_key=" in log:
            break
        await asyncio.sleep(0.1)
    assert "GET /chats?api_key=… HTTP/1.1" in log, log[-2000:]
    assert key not in log


async def test_a_body_trickled_faster_than_the_idle_deadline_is_cut_off_by_the_total_deadline(server):
    """A byte a second never leaves the body idle for 2 s; the whole body still has 4 s, on any route,
    the import's included (authenticated: its body is read)."""
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    declared = b"POST /chats HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    importing = (
        b"POST /chats/import HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    times = await asyncio.gather(*(trickle(server.url, head, b" ", every=1.0) for head in (declared, declared, importing, importing)))
    print(f"\nbodies trickled a byte a second cut after {times} s")
    assert all(t is not None and t < BODY_DEADLINE + 4 for t in times), times
