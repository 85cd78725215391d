"""`memory-agent mcp` over stdio: a line that is not a JSON-RPC message gets a JSON-RPC error, and serving goes on.

The SDK's stdio transport (mcp.server.stdio) reads each stdin line as a message; a line it cannot
read (not JSON, not UTF-8, or JSON that is no JSON-RPC message) goes into the read stream as the
pydantic ValidationError, and the SDK's dispatcher drops that with a debug log: the client that
sent it got no answer and waited forever. Here that error is answered as JSON-RPC 2.0 says
(-32700 Parse error, or -32600 Invalid Request with the line's id when it has a usable one), said
on stderr, and every message that could be read goes on to the server as before. A blank line is
ignored.
"""

from __future__ import annotations

import contextlib
import logging

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger(__name__)


async def run_stdio(server: MCPServer) -> None:
    """Serve ``server`` on stdin/stdout until stdin closes (MCPServer.run_stdio_async, plus the answers above)."""
    async with stdio_server() as (read_stream, write_stream):
        checked_send, checked_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def answer_unreadable_lines() -> None:
            async with read_stream, checked_send:
                async for item in read_stream:
                    if isinstance(item, SessionMessage):
                        await checked_send.send(item)
                        continue
                    # A JSON-RPC batch (MCP 2025-03-26, still negotiated, takes them): each message on its own.
                    readable, answers = batch_messages(item)
                    for message in readable:
                        await checked_send.send(SessionMessage(message))
                    if not readable and not answers and (answer := unreadable_line_answer(item)) is not None:
                        answers = [answer]
                    for answer in answers:
                        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await write_stream.send(SessionMessage(answer))

        # The SDK's dispatcher takes an observer for these errors, but Server.run gives no way to pass it: hence this filter.
        lowlevel = server._lowlevel_server  # what run_stdio_async itself runs
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_unreadable_lines)
            await lowlevel.run(checked_read, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()


def batch_messages(exc: Exception) -> tuple[list, list[types.JSONRPCError]]:
    """A line that is a non-empty JSON array (a batch): its messages, and an Invalid Request answer for
    each element that is none (with its id, if it has a usable one). Nothing for any other line.
    (Each request's answer is its own line, not one array: a client matches answers by id.)"""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    items = errors[0].get("input") if errors else None
    if not isinstance(items, list) or not items:
        return [], []
    readable, answers = [], []
    for item in items:
        try:
            readable.append(types.jsonrpc_message_adapter.validate_python(item, by_name=False))
        except ValidationError:
            id_ = _usable_id(item)
            log.warning("MCP stdio: an element of a batch is not a JSON-RPC message; answered with error %s (id %r)", types.INVALID_REQUEST, id_)
            answers.append(types.JSONRPCError(jsonrpc="2.0", id=id_, error=types.ErrorData(
                code=types.INVALID_REQUEST, message="Invalid Request", data="an element of the batch is not a JSON-RPC 2.0 message")))
    return readable, answers


def unreadable_line_answer(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error answering a stdin line the SDK could not read as a message; None for a blank line."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    if not errors or errors[0]["type"] == "json_invalid":
        line = errors[0].get("input") if errors else None
        if isinstance(line, str) and not line.strip():
            log.debug("MCP stdio: a blank line, ignored")
            return None
        reason = f"the line is not valid JSON ({errors[0]['msg'] if errors else exc})"
        code, message, id_ = types.PARSE_ERROR, "Parse error", None
    else:
        code, message, id_ = types.INVALID_REQUEST, "Invalid Request", _request_id(errors)
        reason = "the line is JSON but not a JSON-RPC 2.0 request, notification or response"
    log.warning("MCP stdio: %s; answered with error %s %s (id %s), still serving", reason, code, message, "null" if id_ is None else repr(id_))
    return types.JSONRPCError(jsonrpc="2.0", id=id_, error=types.ErrorData(code=code, message=message, data=reason))


def _request_id(errors: list) -> int | str | None:
    """The line's own id, if it is an object with a usable one (an int or a string).

    pydantic names the top-level value as the input of an error on a union member itself (loc: the
    member) or of a field missing from it (loc: member, field); other errors carry a part of it.
    """
    for error in errors:
        loc, value = error["loc"], error.get("input")
        if isinstance(value, dict) and (len(loc) <= 1 or (len(loc) == 2 and error["type"] == "missing")):
            return _usable_id(value)
    return None


def _usable_id(value: object) -> int | str | None:
    """A JSON-RPC object's id when it can be answered under it (an int or a string, not a bool)."""
    id_ = value.get("id") if isinstance(value, dict) else None
    return id_ if isinstance(id_, (int, str)) and not isinstance(id_, bool) else None
