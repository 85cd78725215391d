"""More lines a client may send `memory-agent mcp` over stdio: a batch, a huge line, a notification
with bad params; then a tool call, and a clean shutdown (a real subprocess, every read bounded)."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from tests.integration.test_mcp_stdio_bad_input import INIT, INVALID_REQUEST, PARSE_ERROR, STARTUP_SECONDS, mcp_over_stdio, next_answer, request


@pytest.mark.slow
async def test_batches_huge_lines_and_bad_notifications_are_answered_and_tools_still_work(new_database, tmp_path):
    async with mcp_over_stdio(new_database("mcpmore"), tmp_path / "stderr.log", limit=2**24) as proc:
        async def send(line: bytes) -> None:
            proc.stdin.write(line)
            await proc.stdin.drain()

        await send(first := request(1, "initialize", INIT))
        assert (await next_answer(proc, first, STARTUP_SECONDS))["id"] == 1
        await send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

        # A notification with params that are no object: Invalid Request, id null (as JSON-RPC 2.0's own example).
        bad_note = b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": "x"}\n'
        await send(bad_note)
        answer = await next_answer(proc, bad_note)
        assert answer["id"] is None and answer["error"]["code"] == INVALID_REQUEST, answer
        # A notification whose params are an object of the wrong shape: JSON-RPC-wise fine, no answer due.
        await send(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}}\n')

        # A huge line (20 MB, not JSON) and a huge valid JSON that is no JSON-RPC message.
        huge = b"x" * (20 * 2**20) + b"\n"
        await send(huge)
        answer = await next_answer(proc, b"<20 MB of x>", 60)
        assert answer["id"] is None and answer["error"]["code"] == PARSE_ERROR, answer
        assert len(json.dumps(answer)) < 10_000, len(json.dumps(answer))
        huge_json = json.dumps({"jsonrpc": "2.0", "id": 11, "method": 5, "pad": "y" * (20 * 2**20)}).encode() + b"\n"
        await send(huge_json)
        answer = await next_answer(proc, b"<20 MB json>", 60)
        assert answer["id"] == 11 and answer["error"]["code"] == INVALID_REQUEST, str(answer)[:500]
        assert len(json.dumps(answer)) < 10_000, len(json.dumps(answer))

        # A tool call works as before.
        await send(call := request(5, "tools/call", {"name": "remember", "arguments": {"text": "I live in Oslo."}}))
        done = await next_answer(proc, call, 60)
        assert done["id"] == 5 and "result" in done and not done["result"].get("isError"), done
        await send(call := request(6, "tools/call", {"name": "recall_context", "arguments": {"context_type": "facts"}}))
        done = await next_answer(proc, call, 60)
        assert done["id"] == 6 and "Oslo" in json.dumps(done), done

        # Shutdown: stdin closed while requests are in flight ends the process cleanly, each answered (a tool
        # call still running gets -32000 "Connection closed", as with the SDK's own run_stdio_async).
        await send(request(7, "tools/list"))
        await send(request(8, "tools/call", {"name": "remember", "arguments": {"text": "I work as a baker."}}))
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        rest = [json.loads(line) for line in (await proc.stdout.read()).splitlines()]
        assert sorted(m["id"] for m in rest) == [7, 8], rest
    log = (tmp_path / "stderr.log").read_text()
    assert log.count("not valid JSON") == 1 and log.count("not a JSON-RPC") == 2, log


@pytest.mark.slow
async def test_each_request_of_a_batch_is_answered_with_its_own_id(new_database, tmp_path):
    """MCP 2025-03-26, which the server still negotiates, says implementations MUST support receiving
    JSON-RPC batches (2025-06-18 dropped them). The SDK cannot read one; the stdio filter answered the
    whole line with one Invalid Request, id null, so a client waited for ids 3 and 4 forever. Each
    request of the batch is now served, and answered under its own id."""
    async with mcp_over_stdio(new_database("mcpbatch"), tmp_path / "stderr.log") as proc:
        proc.stdin.write(first := request(1, "initialize", {**INIT, "protocolVersion": "2025-03-26"}))
        await proc.stdin.drain()
        initialized = await next_answer(proc, first, STARTUP_SECONDS)
        assert initialized["result"]["protocolVersion"] == "2025-03-26", initialized
        batch = b"[" + request(3, "tools/list").strip() + b", " + request(4, "tools/list").strip() + b"]\n"
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n' + batch)
        await proc.stdin.drain()
        answers = []
        while len([a for a in answers if isinstance(a, dict)]) < 2 and not any(isinstance(a, list) for a in answers):
            answers.append(await next_answer(proc, batch, 10))
        ids = sorted(m["id"] for a in answers for m in (a if isinstance(a, list) else [a]))
        assert ids == [3, 4], answers


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_a_signal_stops_the_stdio_server_while_its_stdin_stays_open(new_database, tmp_path, signum, code):
    """`kill` (or Ctrl-C in a terminal) ran the server's clean-up and then left the process waiting, for
    as long as stdin stayed open, on the SDK's thread blocked reading it (python-sdk issue 3551): a host
    that stops a server with SIGTERM had to SIGKILL it. The process now ends once it has cleaned up."""
    async with mcp_over_stdio(new_database("mcpsignal"), tmp_path / "stderr.log") as proc:
        proc.stdin.write(first := request(1, "initialize", INIT))
        await proc.stdin.drain()
        assert (await next_answer(proc, first, STARTUP_SECONDS))["id"] == 1
        proc.send_signal(signum)  # stdin stays open
        try:
            assert await asyncio.wait_for(proc.wait(), 30) == code
        except asyncio.TimeoutError:
            raise AssertionError(f"still running 30s after {signum!r}, its stdin open") from None
