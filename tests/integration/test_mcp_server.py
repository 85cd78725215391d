"""`memory-agent mcp` on real Postgres: the query functions, then the server over stdio and streamable HTTP.

Two users' memory is seeded once per module by running turns through the compiled
graph with a scripted model (folds every turn, so summary boards exist). The MCP
server runs as a real subprocess (`python -m app.cli.main mcp`), reached with the `mcp`
package's own clients; every wait is bounded and every process is stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import anyio
import psycopg
import pytest
from langchain_core.messages import HumanMessage
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared._httpx_utils import create_mcp_http_client

import prompts
from app.mcp import server as mcp_server
from graph.assembly import compile_graph
from core.context import Context
from llm.chat_model import register_model, unregister_model
from memory import chat_search
from memory import queries as q
from memory.backend import open_memory
from storage import api_keys
from tests.conftest import REPO_ROOT
from tests.support.dated_tasks import dated_now
from tests.support.graph_turns import chat_on, stream_turn
from tests.support.scripted_model import ScriptedChatModel, empty_extraction, plain_answers, registered_scripted_model

TOOLS = {"search_conversation_history", "get_conversation_summary", "recall_context", "search_chats", "list_tasks", "remember", "forget"}
# Words only Bob ever said or was told: none may reach Alice's results.
BOB_ONLY = ("Lisbon", "Alfama", "tram")
STARTUP_SECONDS = 90
CALL_SECONDS = 60

# ---------------------------------------------------------------------------- seeded conversations
CRETE = [
    "I'm planning a trip to Crete in June.",
    "The ferry leaves from Piraeus harbour at 9pm.",
    "Which hotel near Chania has a pool?",
]
SOURDOUGH = [
    "My sourdough starter smells like acetone.",
    "I feed the starter with rye flour once a day.",
]
LISBON = [
    "I am moving to Lisbon next spring.",
    "The tram 28 goes past the flat in Alfama.",
]

EXTRACTIONS = {
    CRETE[0]: {
        "new_facts": [{"text": "Is planning a trip to Crete in June", "importance": "high"}],
        "task_updates": [{"action": "add", "description": "Book the ferry from Piraeus to Heraklion", "due": "May 20"}],
    },
    SOURDOUGH[0]: {
        "new_facts": [{"text": "Has a sourdough starter", "importance": "medium"}],
        "task_updates": [{"action": "add", "description": "Buy a new jar for the sourdough starter"}],
    },
    LISBON[0]: {
        "new_facts": [{"text": "Is moving to Lisbon next spring", "importance": "high"}],
        "task_updates": [{"action": "add", "description": "Find a flat in Alfama"}],
    },
}

BOARDS = {
    "crete": {
        "summary": "Alice is planning a June trip to Crete, travelling by ferry.",
        "key_facts": ["The ferry leaves Piraeus at 9pm"],
        "entities": ["Crete", "Piraeus", "Chania"],
        "topics": ["travel", "Crete"],
        "action_items": ["Book the ferry from Piraeus"],
        "pending_questions": ["Which hotel near Chania has a pool?"],
    },
    "sourdough": {
        "summary": "Alice's sourdough starter smells of acetone; she feeds it rye flour.",
        "key_facts": ["The starter is fed once a day"],
        "entities": ["rye flour"],
        "topics": ["baking", "sourdough"],
        "action_items": ["Feed the starter twice a day"],
        "pending_questions": ["Should the starter live in the fridge?"],
    },
    "lisbon": {
        "summary": "Bob is moving to Lisbon next spring and looks at flats in Alfama.",
        "key_facts": ["Tram 28 passes the flat"],
        "entities": ["Lisbon", "Alfama"],
        "topics": ["moving", "Lisbon"],
        "action_items": ["Find a flat in Alfama"],
        "pending_questions": ["Is Alfama quiet at night?"],
    },
}
TITLES = {"crete": "Crete trip planning", "sourdough": "Sourdough starter troubles", "lisbon": "Moving to Lisbon"}


def tagged(messages, tag: str) -> str:
    """The part of the call's prompt inside <tag>…</tag> (other parts may mention other chats)."""
    body = "\n".join(str(m.content) for m in messages if m.type == "human")
    return body.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


TOPIC_WORDS = {"crete": ("crete", "piraeus", "chania"), "sourdough": ("sourdough", "starter"), "lisbon": ("lisbon", "alfama")}


def topic_of(text: str) -> str:
    """Which seeded chat a fold or title call is about (every seeded message names its topic)."""
    text = text.casefold()
    for topic, words in TOPIC_WORDS.items():
        if any(w in text for w in words):
            return topic
    raise AssertionError(f"no known topic in {text[:200]!r}")


def responder(kind, messages):
    if kind == "extract":
        return {**empty_extraction(), **EXTRACTIONS.get(tagged(messages, prompts.USER_MESSAGE_TAG).strip(), {})}
    if kind == "fold":
        return BOARDS[topic_of(tagged(messages, prompts.NEW_MESSAGES_TAG))]
    if kind == "title":
        return {"title": TITLES[topic_of(tagged(messages, prompts.CHAT_SUMMARY_TAG))]}
    return "Noted."


@dataclass
class Seed:
    url: str
    backend: object
    alice: str
    bob: str
    chats: dict[str, str] = field(default_factory=dict)  # topic -> thread id


@pytest.fixture(scope="module")
async def seeded(new_database, minilm):
    """Alice: a Crete chat and a newer sourdough chat. Bob: a Lisbon chat. All on a fresh database."""
    url = new_database("mcp")
    model_name = f"scripted-mcp-{uuid.uuid4().hex[:6]}"
    register_model(model_name, ScriptedChatModel(responder=responder))
    seed = Seed(url=url, backend=None, alice=f"alice{uuid.uuid4().hex[:8]}", bob=f"bob{uuid.uuid4().hex[:8]}")
    try:
        async with open_memory(url, minilm) as backend:
            seed.backend = backend
            graph = compile_graph(backend.checkpointer, backend.store)
            for user, topic, turns in ((seed.alice, "crete", CRETE), (seed.alice, "sourdough", SOURDOUGH), (seed.bob, "lisbon", LISBON)):
                thread = f"chat-{uuid.uuid4().hex[:12]}"  # ids name no topic: errors echo them
                seed.chats[topic] = thread
                # A tiny window folds every turn, so each chat has a summary board.
                ctx = Context(user_id=user, model=model_name, summary_window=2, tail_size=1)
                for text in turns:
                    await graph.ainvoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=ctx)
            yield seed
    finally:
        unregister_model(model_name)


def without_query(payload):
    """The payload minus the echoed query (which may well name Bob's words)."""
    if isinstance(payload, dict):
        return {k: without_query(v) for k, v in payload.items() if k != "query"}
    if isinstance(payload, list):
        return [without_query(v) for v in payload]
    return payload


def assert_nothing_of_bob(payload) -> None:
    text = payload if isinstance(payload, str) else json.dumps(without_query(payload), default=str)
    for word in BOB_ONLY:
        assert word.casefold() not in text.casefold(), f"Bob's '{word}' leaked into Alice's results"


# ---------------------------------------------------------------------------- the query functions
@pytest.mark.slow
async def test_history_search_finds_folded_messages_by_keyword_and_chats_by_meaning(seeded):
    b = seeded.backend
    found = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "Piraeus harbour", None, 10)
    assert found.chats_searched == 2
    top = found.messages[0]
    # The message was folded into the summary long ago; the full history still has it.
    assert (top.chat_id, top.message_index, top.role) == (seeded.chats["crete"], 2, "user")
    assert "Piraeus harbour" in top.snippet and top.matched_terms == ["piraeus", "harbour"]
    assert top.score == 1.25  # both terms, and the phrase as typed

    meaning = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "bread baking", None, 10)
    assert meaning.summaries and meaning.summaries[0].chat_id == seeded.chats["sourdough"]
    assert not [m for m in meaning.messages if "bread" in m.snippet.casefold()]  # nobody said "bread"


async def test_history_search_never_returns_another_users_chats(seeded):
    b = seeded.backend
    found = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "moving to Lisbon flat in Alfama", None, 50)
    assert found.messages == []
    assert {s.chat_id for s in found.summaries} <= {seeded.chats["crete"], seeded.chats["sourdough"]}
    assert_nothing_of_bob(found.model_dump(mode="json"))
    bobs = await q.search_conversation_history(b.store, b.checkpointer, seeded.bob, "Alfama", None, 10)
    assert {m.chat_id for m in bobs.messages} == {seeded.chats["lisbon"]}


async def test_history_search_keeps_to_the_time_range(seeded):
    b = seeded.backend
    today = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "ferry", "today", 10)
    assert today.time_range == "today" and today.messages
    week = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "ferry", "7d", 10)
    assert week.time_range == "last 7d" and week.messages
    past = await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "ferry", "2001-01-01..2001-12-31", 10)
    assert (past.chats_searched, past.messages, past.summaries) == (0, [], [])
    with pytest.raises(q.InvalidTimeRange, match="not understood"):
        await q.search_conversation_history(b.store, b.checkpointer, seeded.alice, "ferry", "since the dawn of time", 10)


def test_time_ranges_parse_to_utc_windows():
    from datetime import datetime, timezone

    now = datetime(2025, 3, 10, 15, 30, tzinfo=timezone.utc)
    assert q.parse_time_range(None, now).start is None
    yesterday = q.parse_time_range("yesterday", now)
    assert (yesterday.start, yesterday.end) == (datetime(2025, 3, 9, tzinfo=timezone.utc), datetime(2025, 3, 10, tzinfo=timezone.utc))
    assert q.parse_time_range("24h", now).start == datetime(2025, 3, 9, 15, 30, tzinfo=timezone.utc)
    assert q.parse_time_range("last 2 weeks", now).start == datetime(2025, 2, 24, 15, 30, tzinfo=timezone.utc)
    span = q.parse_time_range("2025-01-01..2025-01-31", now)
    assert (span.start, span.end) == (datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2025, 2, 1, tzinfo=timezone.utc))
    assert q.parse_time_range("2025-01-01..", now).end is None
    with pytest.raises(q.InvalidTimeRange, match="ends before it starts"):
        q.parse_time_range("2025-02-01..2025-01-01", now)
    with pytest.raises(q.InvalidTimeRange, match="not understood"):
        q.parse_time_range("eventually", now)  # ten characters, but no date


async def test_summary_of_latest_or_named_chat_has_board_record_and_uncovered_tail(seeded):
    b = seeded.backend
    latest = await q.get_conversation_summary(b.store, b.checkpointer, seeded.alice)
    assert latest.chat_id == seeded.chats["sourdough"]  # the newer of Alice's chats
    assert (await q.get_conversation_summary(b.store, b.checkpointer, seeded.alice, " ")).chat_id == latest.chat_id
    crete = await q.get_conversation_summary(b.store, b.checkpointer, seeded.alice, seeded.chats["crete"])
    assert crete.title == "Crete trip planning"
    assert crete.summary.action_items == ["Book the ferry from Piraeus"]
    assert "Pending questions: Which hotel near Chania has a pool?" in crete.summary_text
    assert crete.message_count == 6 and crete.summary_folds >= 1
    # Whatever the summary does not cover yet is shown raw, with its place in the history.
    assert crete.summarized_messages + len(crete.recent_messages) == 6
    assert crete.recent_messages[-1].index == 5 and crete.recent_messages[-1].role == "assistant"


async def test_another_users_chat_id_is_not_found(seeded):
    b = seeded.backend
    with pytest.raises(q.ChatNotFound):
        await q.get_conversation_summary(b.store, b.checkpointer, seeded.alice, seeded.chats["lisbon"])
    with pytest.raises(q.ChatNotFound):
        await q.recall_context(b.store, b.checkpointer, seeded.alice, "action_items", seeded.chats["lisbon"])
    with pytest.raises(q.ChatNotFound, match="no chats yet"):
        await q.get_conversation_summary(b.store, b.checkpointer, f"nobody{uuid.uuid4().hex[:6]}")


async def test_recall_gathers_each_context_type_from_summaries_and_long_term_memory(seeded):
    b = seeded.backend
    actions = await q.recall_context(b.store, b.checkpointer, seeded.alice, "action_items")
    assert [i.text for i in actions.items] == ["Feed the starter twice a day", "Book the ferry from Piraeus"]  # newest chat first
    assert actions.chats_considered == 2 and actions.chat_id is None

    questions = await q.recall_context(b.store, b.checkpointer, seeded.alice, "pending_questions", seeded.chats["crete"])
    assert [(i.text, i.chat_id, i.source) for i in questions.items] == [
        ("Which hotel near Chania has a pool?", seeded.chats["crete"], "chat_summary")
    ]
    entities = await q.recall_context(b.store, b.checkpointer, seeded.alice, "entities")
    assert {i.text for i in entities.items} == {"Crete", "Piraeus", "Chania", "rye flour"}

    facts = await q.recall_context(b.store, b.checkpointer, seeded.alice, "facts")
    stored = {i.text for i in facts.items if i.source == "long_term_memory"}
    from_boards = {i.text for i in facts.items if i.source == "chat_summary"}
    assert stored == {"Is planning a trip to Crete in June", "Has a sourdough starter"}
    assert from_boards == {"The ferry leaves Piraeus at 9pm", "The starter is fed once a day"}

    tasks = await q.recall_context(b.store, b.checkpointer, seeded.alice, "tasks", seeded.chats["crete"])
    assert [(i.text.split(" on ")[0], i.status, i.due, i.chat_title) for i in tasks.items] == [
        ("Book the ferry from Piraeus to Heraklion", "open", "May 20", "Crete trip planning")
    ]
    assert " 20 May 20" in tasks.items[0].text  # the text carries the date "May 20" meant when said
    for result in (actions, questions, entities, facts, tasks):
        assert_nothing_of_bob(result.model_dump(mode="json"))


async def test_recall_context_of_a_chat_takes_the_facts_it_said_again_not_only_those_it_said_first(backend, user_id):
    """A fact said in one chat and again in another was recalled for the first chat only (its first source)."""
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    first, second = f"chat-{uuid.uuid4().hex[:12]}", f"chat-{uuid.uuid4().hex[:12]}"
    for thread in (first, second):
        await graph.ainvoke({"messages": [HumanMessage("I play the trumpet.")]}, {"configurable": {"thread_id": thread}}, context=ctx)

    for thread in (first, second):
        facts = await q.recall_context(backend.store, backend.checkpointer, user_id, "facts", thread)
        assert "Plays the trumpet" in {i.text for i in facts.items if i.source == "long_term_memory"}, thread


async def test_chat_search_ranks_by_similarity_and_recency(seeded):
    b = seeded.backend
    found = await q.search_chats(b.store, seeded.alice, "ferry to a Greek island", 10)
    assert found.chats[0].chat_id == seeded.chats["crete"]
    top = found.chats[0]
    weighted = chat_search.W_SIMILARITY * top.similarity + chat_search.W_WORDS * top.words + chat_search.W_RECENCY * top.recency
    assert top.score == pytest.approx(weighted, abs=0.002)
    assert top.recency > 0.99  # active seconds ago
    recent = await q.search_chats(b.store, seeded.alice, "", 10)
    assert [c.chat_id for c in recent.chats] == [seeded.chats["sourdough"], seeded.chats["crete"]]
    assert_nothing_of_bob((await q.search_chats(b.store, seeded.alice, "Lisbon Alfama tram", 10)).model_dump(mode="json"))


async def test_task_list_filters_by_status(seeded):
    b = seeded.backend
    every = await q.list_tasks(b.store, seeded.alice)
    ferry = dated_now("Book the ferry from Piraeus to Heraklion", "May 20")  # a task's text carries its date (issue 30)
    assert [t.description for t in every.tasks] == [ferry, "Buy a new jar for the sourdough starter"]
    assert (await q.list_tasks(b.store, seeded.alice, "done")).count == 0
    assert (await q.list_tasks(b.store, seeded.alice, "open")).count == 2
    assert [t.description for t in (await q.list_tasks(b.store, seeded.bob)).tasks] == ["Find a flat in Alfama"]


# ---------------------------------------------------------------------------- the MCP server
def server_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL", "MEMORY_AGENT_USER")}
    env["DATABASE_URL"] = url
    return env


async def call(session: ClientSession, name: str, arguments: dict | None = None) -> dict:
    result = await session.call_tool(name, arguments or {}, read_timeout_seconds=CALL_SECONDS)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def exercise_every_tool(session: ClientSession, seed: Seed) -> None:
    """List the tools, call each one, check Alice's data comes back and Bob's never does."""
    listed = (await session.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    schemas = {t.name: t.input_schema for t in listed}
    assert schemas["search_conversation_history"]["required"] == ["query"]
    assert set(schemas["search_conversation_history"]["properties"]) == {"query", "time_range", "limit"}
    assert schemas["recall_context"]["properties"]["context_type"]["enum"] == list(q.CONTEXT_TYPES)
    # No tool lets the client pick whose memory it reads.
    assert not [p for schema in schemas.values() for p in schema["properties"] if "user" in p.casefold()]
    assert all(t.description and t.output_schema for t in listed)

    history = await call(session, "search_conversation_history", {"query": "Piraeus harbour", "time_range": "7d"})
    assert history["messages"][0]["chat_id"] == seed.chats["crete"]
    summary = await call(session, "get_conversation_summary", {"chat_id": seed.chats["crete"]})
    assert summary["summary"]["pending_questions"] == ["Which hotel near Chania has a pool?"]
    latest = await call(session, "get_conversation_summary")
    assert latest["title"] == "Sourdough starter troubles"
    actions = await call(session, "recall_context", {"context_type": "action_items"})
    assert [i["text"] for i in actions["items"]] == ["Feed the starter twice a day", "Book the ferry from Piraeus"]
    chats = await call(session, "search_chats", {"query": "sourdough bread", "limit": 1})
    assert [c["chat_id"] for c in chats["chats"]] == [seed.chats["sourdough"]]
    tasks = await call(session, "list_tasks", {"status": "open"})
    assert tasks["count"] == 2

    leaks = [
        await call(session, "search_conversation_history", {"query": "Lisbon Alfama tram"}),
        await call(session, "search_chats", {"query": "moving to Lisbon"}),
        await call(session, "list_tasks"),
        *[await call(session, "recall_context", {"context_type": t}) for t in q.CONTEXT_TYPES],
    ]
    assert_nothing_of_bob(leaks)

    # Bob's chat id is simply not one of Alice's chats; the reason comes back as the tool's error.
    refused = await session.call_tool("get_conversation_summary", {"chat_id": seed.chats["lisbon"]}, read_timeout_seconds=CALL_SECONDS)
    assert refused.is_error and "No chat" in refused.content[0].text
    assert_nothing_of_bob(refused.content[0].text)
    bad_range = await session.call_tool("search_conversation_history", {"query": "ferry", "time_range": "eventually"})
    assert bad_range.is_error and "time_range" in bad_range.content[0].text
    nul = await session.call_tool("search_conversation_history", {"query": "fer\x00ry"})
    assert nul.is_error and "NUL character" in nul.content[0].text
    too_long = await session.call_tool("search_chats", {"query": "x" * 501})
    assert too_long.is_error and "the limit is 500" in too_long.content[0].text
    # A value the agent's own models refuse comes back as its reason, not pydantic's report naming our classes.
    invisible = await session.call_tool("remember", {"text": "\u200b"})
    assert invisible.is_error and "fact text is empty" in invisible.content[0].text
    assert "NewFact" not in invisible.content[0].text and "pydantic" not in invisible.content[0].text


@pytest.mark.slow  # an MCP server process
async def test_stdio_server_serves_only_its_users_memory(seeded):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli.main", "mcp", "--user", seeded.alice],
        env=server_env(seeded.url),
        cwd=str(REPO_ROOT),
    )
    with tempfile.TemporaryFile(mode="w+") as errlog:
        started = time.perf_counter()
        with anyio.fail_after(STARTUP_SECONDS + CALL_SECONDS):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                print(f"stdio: initialized in {time.perf_counter() - started:.2f}s")
                await exercise_every_tool(session, seeded)
        print(f"stdio: whole session {time.perf_counter() - started:.2f}s")
        errlog.seek(0)
        log = errlog.read()
    assert f"memory of user '{seeded.alice}' on stdio" in log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_until_listening(proc: subprocess.Popen, port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"MCP server exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"MCP server not listening on port {port} after {STARTUP_SECONDS}s")


@pytest.mark.slow  # an MCP server process
async def test_streamable_http_server_serves_only_its_users_memory_to_their_key(seeded):
    port = free_port()
    key = await api_keys.create_key(seeded.backend.pool, seeded.alice, "mcp test")
    with tempfile.TemporaryFile(mode="w+") as errlog:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "mcp", "--user", seeded.alice, "--transport", "http", "--port", str(port)],
            cwd=REPO_ROOT,
            env=server_env(seeded.url),
            stdin=subprocess.DEVNULL,
            stdout=errlog,
            stderr=errlog,
        )
        try:
            await wait_until_listening(proc, port, time.monotonic() + STARTUP_SECONDS)
            print(f"http: listening after {time.perf_counter() - started:.2f}s")
            url = f"http://127.0.0.1:{port}/mcp"
            with anyio.fail_after(CALL_SECONDS * 2):
                # Without a key (the reviewer's F3: a raw `tools/call forget` erased a fact), nothing is served.
                async with create_mcp_http_client() as http:
                    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
                    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
                    for method, params in (("initialize", init), ("tools/call", {"name": "forget", "arguments": {"what": "sourdough"}})):
                        refused = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
                        assert refused.status_code == 401 and "Missing API key" in refused.json()["error"]["message"], method
                async with (
                    create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
                    streamable_http_client(url, http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    await exercise_every_tool(session, seeded)
            print(f"http: whole session {time.perf_counter() - started:.2f}s")
        finally:
            proc.terminate()
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
                code = None
        errlog.seek(0)
        log = errlog.read()
    assert f"at http://127.0.0.1:{port}/mcp" in log
    assert "remember and forget change it; every request needs one of" in log
    assert code == 0, f"server did not stop cleanly on SIGTERM:\n{log[-2000:]}"


def test_the_user_is_required(monkeypatch, capsys):
    monkeypatch.delenv("MEMORY_AGENT_USER", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        mcp_server.main([])
    assert exit_info.value.code == 2
    assert "--user is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mcp_server.main(["--user", "a/b"])
    assert "invalid user id" in capsys.readouterr().err
    monkeypatch.setenv("MEMORY_AGENT_USER", "dana")
    assert mcp_server.build_parser().parse_args([]).user == "dana"


async def test_forgetting_a_word_of_a_role_status_or_importance_leaves_every_tool_answering(backend, user_id):
    """The tools' results are redacted whole before they leave. Forgetting a band called "Medium Rare" hid
    "medium" in every string, a fact's importance too, and recall_context failed for every fact from then on
    ("items.0.importance: Input should be 'low', 'medium' or 'high'"); the same for a task's status "open" and a
    message's role "assistant". A value of a closed vocabulary holds no one's words: it is kept as it is."""
    extract = {**empty_extraction(), "new_facts": [{"text": "Studies history at university", "importance": "medium"}],
               "task_updates": [{"action": "add", "description": "Finish the history essay"}]}
    answers = plain_answers(extract=lambda text: extract, title="Exams", summary="History exams.", reply="Good luck with the exams.")
    with registered_scripted_model(answers) as (model, _):
        graph, ctx, thread = chat_on(backend, user_id, model)
        await stream_turn(graph, "I am studying for my history exams.", thread, ctx)
    server = mcp_server.build_server(backend, user_id)

    async def tool(name: str, arguments: dict) -> dict:
        return (await server.call_tool(name, arguments)).structured_content

    for fact, words in (("Plays in a band called Medium Rare", "Medium Rare"), ("Volunteers at the Open Door shelter", "the Open Door shelter"),
                        ("Has a parrot called Assistant", "Assistant")):
        assert (await tool("remember", {"text": fact}))["remembered"]
        assert (await tool("forget", {"what": words}))["forgotten"]

    facts = (await tool("recall_context", {"context_type": "facts"}))["items"]
    assert ("Studies history at university", "medium", "long_term_memory") in [(i["text"], i["importance"], i["source"]) for i in facts]
    assert [(t["description"], t["status"]) for t in (await tool("list_tasks", {}))["tasks"]] == [("Finish the history essay", "open")]
    tasks = (await tool("recall_context", {"context_type": "tasks"}))["items"]
    assert [(i["text"], i["status"]) for i in tasks] == [("Finish the history essay", "open")]
    said = (await tool("search_conversation_history", {"query": "exams"}))["messages"]
    assert {(m["role"], m["snippet"]) for m in said} == {("user", "I am studying for my history exams."), ("assistant", "Good luck with the exams.")}
    summary = await tool("get_conversation_summary", {})
    assert [(m["role"], m["text"]) for m in summary["recent_messages"]][-1] == ("assistant", "Good luck with the exams.")


@pytest.mark.slow  # each call waits out the pool's timeout
async def test_a_database_outage_is_said_in_the_tools_error(new_database, server_url, minilm):
    """With the database gone, every tool call answered only "Error executing tool list_tasks": the caller
    could not tell a fault from an outage to retry after. It now says so, as `serve`'s 503 does."""
    url = new_database("mcpdown")
    async with open_memory(url, minilm) as backend:
        server = mcp_server.build_server(backend, "dana")
        assert (await server.call_tool("list_tasks", {})).structured_content["count"] == 0
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{psycopg.conninfo.conninfo_to_dict(url)["dbname"]}" WITH (FORCE)')
        for name, arguments in (("list_tasks", {}), ("remember", {"text": "Prefers tea"})):
            with pytest.raises(ToolError) as error:
                await server.call_tool(name, arguments)
            assert not isinstance(error.value, UnexpectedToolError), error.value
            assert "The memory database is unavailable: try again shortly." in str(error.value)


async def test_a_blank_history_query_is_refused_with_its_reason(backend, user_id):
    """A query of spaces or invisible characters passed the tool's minLength and answered "chats_searched": 0
    and no hits, as if the user had no chats and nothing matched; blank is never a value (docs/api.md)."""
    server = mcp_server.build_server(backend, user_id)
    for blank in ("   ", "\u200b", " \u2060\n"):
        with pytest.raises(ToolError, match="The query is blank") as error:
            await server.call_tool("search_conversation_history", {"query": blank})
        assert not isinstance(error.value, UnexpectedToolError)
