"""`memory-agent mcp`: one user's memory as MCP tools (stdio or streamable HTTP).

The server opens one backend for its lifetime and answers only for the user named
at start: no tool takes a user id, so a client cannot read anyone else's memory.
Seven tools: five read, and ``remember`` and ``forget`` write, through the same writer as the
agent (with the same provenance: "remember"); nothing the user had forgotten is ever returned.
Over stdio the MCP host that spawns the server is the user. Over HTTP every request needs one of
the user's API keys, the same as `serve`'s (app/mcp/http_access.py).

    memory-agent mcp --user dana                          # stdio (for an MCP host that spawns it)
    memory-agent mcp --user dana --transport http --port 8765   # http://127.0.0.1:8765/mcp, with dana's key
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import Annotated, Literal, NoReturn

import psycopg
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from core.cli_arguments import port_arg
from app.mcp.http_access import CALLER, DATABASE_UNAVAILABLE, KeyRequired
from app.mcp.stdio import run_stdio
from memory import forgetting
from memory import queries as q
from memory.writer.extraction import Remembered, remember_fact
from memory.backend import MemoryBackend, open_memory
from core.errors import MemoryAgentError
from core.namespaces import user_root
from core.text_validation import LINE_CHARS, BoundedText, Identifier, ShortText, is_blank
from storage import owner_forgets
from storage.postgres import stop_embedded_postgres

log = logging.getLogger(__name__)

SERVER_NAME = "memory-agent"
HTTP_PATH = "/mcp"
DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
FORGETS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

READ_TOOLS = ("search_conversation_history", "get_conversation_summary", "recall_context", "search_chats", "list_tasks")
WRITE_TOOLS = ("remember", "forget")
EXPOSED = f"{len(READ_TOOLS)} tools read it, {' and '.join(WRITE_TOOLS)} change it"

# Arguments are validated like every text entering the system (core.text_validation): bounded, no NUL.
Query = BoundedText(LINE_CHARS)
ChatId = Annotated[
    Identifier | None,
    Field(description="Id of one of the user's chats (chat_id from search_chats or search results). Omit for the most recent chat."),
]
Limit = Annotated[int, Field(ge=1, le=q.MAX_LIMIT, description="Most results to return (per list).")]


def build_server(backend: MemoryBackend, user_id: str) -> MCPServer:
    """An MCP server whose tools read ``user_id``'s memory from ``backend`` (five) or change it (remember, forget)."""
    user_root(user_id)  # refuses an invalid id before anything is served
    store, checkpointer = backend.store, backend.checkpointer
    server = MCPServer(
        SERVER_NAME,
        title="memory-agent memory",
        instructions=(
            "Access to what the memory agent remembers about one user (remember and forget change it): past chats (summaries and full "
            "histories), facts, tasks, action items and open questions. Find chats with search_chats or "
            "search_conversation_history, then pass their chat_id to get_conversation_summary or recall_context."
        ),
        log_level="WARNING",
    )

    async def redacted(result):
        # What the user had forgotten never leaves through MCP, whatever copy a read finds.
        return (await forgetting.redactor_for(store, user_id)).result(result)

    @contextlib.contextmanager
    def user_errors():
        # Errors the caller can fix (unknown chat, bad time range) go back as their message.
        try:
            yield
        except ValidationError as exc:  # a value a model refused: its reasons, not pydantic's report naming our classes
            raise ToolError("; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())) from exc
        except (MemoryAgentError, ValueError) as exc:
            raise ToolError(str(exc)) from exc
        except psycopg.OperationalError as exc:  # an outage to retry after, not a fault (the SDK said only "Error executing tool")
            log.warning("MCP: the memory database is unavailable: %s", exc)
            raise ToolError(DATABASE_UNAVAILABLE) from exc

    @server.tool(annotations=READ_ONLY)
    async def search_conversation_history(
        query: Annotated[Query, Field(min_length=1, description="What to look for: words or a description of the topic.")],
        time_range: Annotated[
            ShortText,
            Field(description=f"Only messages said in this window (and chats active in it): {q.TIME_RANGE_HELP}."),
        ] = "all",
        limit: Limit = 10,
    ) -> q.ConversationSearch:
        """Search the user's past conversations. Returns two lists: `summaries`, chats whose summary is
        semantically close to the query (meaning, not exact words), and `messages`, individual messages of all the
        user's chats holding the query's words or close to it in meaning (each with chat_id, position, role, the
        time it was said and a snippet), best first.
        Use it to answer "what did we say about X" or "when did I mention Y"."""
        if is_blank(query):  # min_length lets spaces and invisible characters through
            raise ToolError("The query is blank (only spaces or invisible characters): say what to look for.")
        with user_errors():
            return await redacted(await q.search_conversation_history(store, checkpointer, user_id, query, time_range, limit))

    @server.tool(annotations=READ_ONLY)
    async def get_conversation_summary(chat_id: ChatId = None) -> q.ConversationSummary:
        """The running summary of one chat (the most recent chat when chat_id is omitted): summary text, key facts,
        entities, topics, action items and pending questions, plus the chat's title, dates, message count and the
        newest messages the summary does not cover yet."""
        with user_errors():
            return await redacted(await q.get_conversation_summary(store, checkpointer, user_id, chat_id))

    @server.tool(annotations=READ_ONLY)
    async def recall_context(
        context_type: Annotated[
            Literal["action_items", "pending_questions", "facts", "entities", "tasks"],
            Field(description="Which kind of context to recall."),
        ],
        chat_id: Annotated[
            Identifier | None,
            Field(description="Recall from this chat only. Omit to recall from all of the user's chats."),
        ] = None,
    ) -> q.RecalledContext:
        """Recall one kind of remembered context. action_items / pending_questions / entities come from the chats'
        running summaries; facts are the user's long-term facts plus the key facts of the summaries; tasks are the
        user's stored tasks (with status and due date). Each item says which chat it comes from."""
        with user_errors():
            return await redacted(await q.recall_context(store, checkpointer, user_id, context_type, chat_id))

    @server.tool(annotations=READ_ONLY)
    async def search_chats(
        query: Annotated[Query, Field(description="Topic to look for. An empty query lists the most recent chats.")] = "",
        limit: Limit = 10,
    ) -> q.ChatSearch:
        """Find the user's chats about a topic, ranked by similarity of the chat's summary to the query and by
        recency (see the score fields). Returns chat_id, title, a summary snippet, dates and the scores."""
        with user_errors():
            return await redacted(await q.search_chats(store, user_id, query, limit))

    @server.tool(annotations=READ_ONLY)
    async def list_tasks(
        status: Annotated[
            Literal["open", "in_progress", "done"] | None,
            Field(description="Only tasks with this status. Omit for all tasks."),
        ] = None,
    ) -> q.TaskList:
        """The user's tasks (to-dos the agent keeps), oldest first, each with id, description, status, due date
        and the chat it was created in."""
        with user_errors():
            return await redacted(await q.list_tasks(store, user_id, status))

    @server.tool(annotations=WRITES)
    async def remember(
        text: Annotated[Query, Field(min_length=1, description="One fact about the user, e.g. 'Prefers tea to coffee'.")],
        ctx: Context,
    ) -> Remembered:
        """Remember one fact about the user, through the agent's own writer: a duplicate is merged, a new value
        of a single-valued fact ('Lives in …') supersedes the old one, and the fact records that it came from
        this tool. Something the user had the agent forget is not remembered again."""
        with user_errors(), key_caller(ctx):
            return await remember_fact(store, user_id, text)

    @server.tool(annotations=FORGETS)
    async def forget(
        what: Annotated[Query, Field(min_length=1, description="What to forget, in the user's words ('that I work as a nurse', 'Porto').")],
        ctx: Context,
    ) -> forgetting.Forgotten:
        """Forget something about the user everywhere it is kept: the facts, profile fields, preferences and tasks
        that carry it, and its copies in past messages, summaries and chat records. It is never returned again."""
        with user_errors(), key_caller(ctx):
            return await forgetting.forget_in_words(store, user_id, what)

    return server


@contextlib.contextmanager
def key_caller(ctx: Context):
    """Within the block, writes are checked against the forget generation the HTTP request's key was valid
    under (app.mcp.http_access), so a forget-me since refuses them (storage.owner_forgets); over stdio, and
    in-process, the caller is known now and nothing is checked."""
    try:
        request = ctx.request_context.request
    except ValueError:  # no request: called in-process
        request = None
    token = owner_forgets.caller.set(getattr(request, "scope", {}).get(CALLER))
    try:
        yield
    finally:
        owner_forgets.caller.reset(token)


def _default_user() -> str | None:
    return os.environ.get("MEMORY_AGENT_USER") or None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-agent mcp",
        description=(
            "Serve one user's memory (chats, summaries, facts, tasks) as MCP tools: five read it, remember and "
            "forget change it. Over HTTP every request needs one of the user's API keys (Authorization: Bearer <key>; "
            "`memory-agent keys create --user U`)."
        ),
    )
    parser.add_argument("--user", default=_default_user(), help="whose memory to serve (required; default $MEMORY_AGENT_USER)")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP: address to listen on (default 127.0.0.1); requests must name it or a loopback name as Host (any after 0.0.0.0 or ::)",
    )
    parser.add_argument("--port", type=port_arg, default=DEFAULT_PORT, help=f"HTTP: port (default {DEFAULT_PORT}); the endpoint is {HTTP_PATH}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log requests and timings to stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.user:
        parser.error("--user is required (or set MEMORY_AGENT_USER)")
    try:
        user_root(args.user)
    except ValueError as exc:
        parser.error(str(exc))
    # Before the MCP server configures logging: ours wins, and everything goes to stderr
    # (stdout is the protocol channel under stdio).
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # uvicorn shuts down gracefully on SIGTERM and then re-raises it: turn that into an
    # exception so the backend is closed on the way out, not skipped by a default kill.
    # Over stdio Ctrl-C stops serving as SIGTERM does: asyncio's own SIGINT handler only cancels the main
    # task, which then waits for the SDK's thread reading stdin (see _leave).
    stops = (signal.SIGTERM, signal.SIGINT) if args.transport == "stdio" else (signal.SIGTERM,)
    previous = {signum: signal.signal(signum, _stop_serving) for signum in stops}
    try:
        asyncio.run(serve(args.user, args.transport, args.host, args.port))
        return 0
    except StopServing as stop:
        code = stop.code
    except KeyboardInterrupt:
        code = 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if args.transport == "stdio":
        _leave(code)
    return code


class StopServing(Exception):
    """SIGTERM (or, over stdio, SIGINT) arrived: stop serving, and exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _stop_serving(signum, frame) -> None:
    raise StopServing(130 if signum == signal.SIGINT else 0)


def _leave(code: int) -> NoReturn:
    """End the process now that a signal stopped serving stdio and everything of ours is closed. The SDK
    reads stdin on a worker thread no signal wakes, and the interpreter would wait for it to exit until
    stdin closed (python-sdk issue 3551): a host's SIGTERM, or Ctrl-C, did not stop the process."""
    stop_embedded_postgres()  # what exiting does (pgserver stops it unless another process uses it)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):  # os._exit flushes nothing: an answer written last stays whole
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to deliver
            pass
    os._exit(code)


async def serve(user_id: str, transport: str, host: str, port: int) -> None:
    started = time.perf_counter()
    async with contextlib.AsyncExitStack() as stack:
        # Nothing may reach stdout before the stdio transport owns it.
        with contextlib.redirect_stdout(sys.stderr):
            backend = await stack.enter_async_context(open_memory())
        server = build_server(backend, user_id)
        ready = time.perf_counter() - started
        if transport == "stdio":
            print(
                f"memory-agent MCP: memory of user '{user_id}' on stdio (ready in {ready:.1f}s): {EXPOSED}", file=sys.stderr, flush=True
            )
            await run_stdio(server)
        else:
            if host not in LOOPBACK:
                log.warning("MCP on %s:%s is plain HTTP: API keys and memory cross the network in clear (put TLS in front)", host, port)
            print(
                f"memory-agent MCP: memory of user '{user_id}' at http://{host}:{port}{HTTP_PATH} (ready in {ready:.1f}s): "
                f"{EXPOSED}; every request needs one of "
                f"{user_id}'s API keys (Authorization: Bearer <key>; `memory-agent keys create --user {user_id}`)",
                file=sys.stderr,
                flush=True,
            )
            await serve_http(server, backend, user_id, host, port)


def http_app(server: MCPServer, backend: MemoryBackend, user_id: str, host: str):
    """The streamable-HTTP ASGI app, behind the user's API key and the Host/Origin checks."""
    # The SDK's own Host/Origin check is off: KeyRequired makes it, as docs/api.md says (the SDK's
    # also wanted a port in Host and an http Origin, refusing "Host: localhost" with 421 and plain text).
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host,
                                     transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return KeyRequired(app, backend.pool, user_id, host)


async def serve_http(server: MCPServer, backend: MemoryBackend, user_id: str, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(http_app(server, backend, user_id, host), host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()
