"""`memory-agent mcp` over stdio answers a malformed line with a JSON-RPC error and goes on serving.

The server runs as a real subprocess (`python -m app.cli.main mcp`) on a fresh database; the test
writes raw lines to its stdin, as a client with a bug would, and reads its stdout line by line.
Every read is bounded, so a line the server never answers fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.conftest import REPO_ROOT

STARTUP_SECONDS = 90
ANSWER_SECONDS = 20
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


@asynccontextmanager
async def mcp_over_stdio(database_url: str, stderr: Path, **options) -> AsyncIterator[asyncio.subprocess.Process]:
    """`memory-agent mcp` for a new user on ``database_url``, its stderr written to ``stderr``; killed
    at the end if it has not exited (``options``: for the process, e.g. its stdout's line limit)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL", "MEMORY_AGENT_USER")}
    env["DATABASE_URL"] = database_url
    with stderr.open("w") as errlog:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.cli.main", "mcp", "--user", f"dana{uuid.uuid4().hex[:8]}",
            cwd=REPO_ROOT, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errlog, **options,
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def request(id_: int, method: str, params: dict | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params else {})}).encode() + b"\n"


async def next_answer(proc: asyncio.subprocess.Process, sent: bytes, seconds: float = ANSWER_SECONDS) -> dict:
    """The next message on the server's stdout; a test failure (not a hang) if none comes in time."""
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), seconds)
    except asyncio.TimeoutError:
        raise AssertionError(f"no answer within {seconds}s to {sent!r}") from None
    assert line, f"the server closed stdout after {sent!r} (exit code {proc.returncode})"
    return json.loads(line)


@pytest.mark.slow  # an MCP server process
async def test_a_malformed_stdio_line_gets_a_json_rpc_error_and_the_next_request_is_answered(new_database, tmp_path):
    async with mcp_over_stdio(new_database("mcpbad"), tmp_path / "stderr.log") as proc:
        async def send(line: bytes) -> None:
            proc.stdin.write(line)
            await proc.stdin.drain()

        await send(first := request(1, "initialize", INIT))
        initialized = await next_answer(proc, first, STARTUP_SECONDS)
        assert initialized["id"] == 1 and "result" in initialized, initialized
        await send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

        # Not JSON, and bytes that are not UTF-8: a parse error, id null (the id cannot be read).
        for garbage in (b"this is not json\n", b'{"jsonrpc": "2.0", "id": 9, "method": \n', b"\xff\xfe\x80 not utf-8\n"):
            await send(garbage)
            answer = await next_answer(proc, garbage)
            assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
            assert answer["error"]["code"] == PARSE_ERROR and answer["error"]["message"] == "Parse error", answer

        # An empty line is ignored: the next answer is the next line's.
        await send(b"\n")

        # JSON, but not a JSON-RPC message: an invalid request, with its id when it has a usable one.
        # (A batch of such values, [1, 2], gets one for each, as JSON-RPC 2.0's own example does.)
        for wrong, ids in ((b'{"jsonrpc": "2.0", "id": 7, "method": 5}\n', [7]), (b'{"jsonrpc": "2.0", "id": "abc", "method": "tools/list", "params": "x"}\n', ["abc"]),
                           (b"[1, 2]\n", [None, None]), (b"[]\n", [None]), (b"42\n", [None])):
            await send(wrong)
            for id_ in ids:
                answer = await next_answer(proc, wrong)
                assert answer["id"] == id_ and answer["error"]["code"] == INVALID_REQUEST, (wrong, answer)
                assert answer["error"]["message"] == "Invalid Request", answer

        # Nothing is lost: the server still serves the session it had.
        await send(listing := request(2, "tools/list"))
        listed = await next_answer(proc, listing)
        assert listed["id"] == 2, listed
        assert "remember" in {tool["name"] for tool in listed["result"]["tools"]}, listed

        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    log = (tmp_path / "stderr.log").read_text()
    # Each refusal is said on stderr too, for whoever reads the host's log.
    assert log.count("not valid JSON") == 3 and log.count("not a JSON-RPC") == 6, log
