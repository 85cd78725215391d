"""The agent on a real instruction-tuned model (Qwen2.5-Coder Instruct, llama-cpp-python's server, 2 cores).

Mechanics only: what reaches Postgres, what the next process sends the model, that
replies stream, that a fold and a confirmed task change go through, that a refused
``json_schema`` is recovered from, that no tool-call JSON is shown. Wording is the
model's business.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import uuid

import pytest

import prompts
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.types import Command

from app.cli.chat_session import ChatSession
from graph.assembly import compile_graph
from core.context import Context
from prompts.reply_prompt import render_user_context
from llm import chat_model
from llm.chat_model import load_chat_model
from llm.structured import invoke_structured, remembered_mode
from memory.backend import open_memory
from memory.extractor import build_extraction_messages
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard
from memory.user_memory import get_user_document, list_facts, stored_tasks
from tests.conftest import REPO_ROOT
from tests.llm.conftest import TEST_REPLY_CAP, forwarding_responder
from tests.support.openai_stub_server import StubReply, StubRequest
from tests.support.graph_turns import new_thread, stream_turn

# A turn is several model calls of ~1,000 prompt tokens: minutes on a busy 2-core machine.
pytestmark = pytest.mark.timeout(1800)

CALL_TEXT = re.compile(r'<tool_call>|"arguments"\s*:|"parameters"\s*:|\{\s*"name"\s*:')


def run_cli(lines: list[str], database_url: str, env: dict[str, str], user: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat", "--user", user, "--new"],
        input="".join(f"{line}\n" for line in lines).encode(),
        capture_output=True,
        cwd=REPO_ROOT,
        env={**base, **env, "DATABASE_URL": database_url},
        timeout=900,
    )


async def stored_memory(url: str, minilm, user: str) -> list[str]:
    """What is stored for ``user`` (profile, preferences, facts, open tasks), as the prompt's user context shows it."""
    async with open_memory(url, minilm) as backend:
        doc = await get_user_document(backend.store, user)
        loaded = {
            "profile": doc.profile.model_dump(mode="json"),
            "preferences": doc.preferences.model_dump(mode="json"),
            "facts": [{"text": f.text} for f in await list_facts(backend.store, user)],
            "tasks": [t.model_dump(mode="json") for t in await stored_tasks(backend.store, user, include_done=False)],
        }
    return [line for line in render_user_context(loaded).splitlines() if line.startswith("- ")]


async def test_a_fact_told_in_one_process_is_stored_and_is_in_the_next_process_prompt(
    recording_proxy, local_server, new_database, minilm
):
    url, user = new_database("llmcli"), f"u{uuid.uuid4().hex[:8]}"
    env = {**local_server.env(), "OPENAI_BASE_URL": recording_proxy.base_url, "MEMORY_AGENT_MAX_REPLY_TOKENS": TEST_REPLY_CAP}
    env["MEMORY_AGENT_TOOLS"] = "off"  # this test is about memory across processes; a small model may call add_task
    first = run_cli(["My name is Dana and I live in Haifa."], url, env, user)
    assert first.returncode == 0, first.stderr.decode()
    assert "memory not updated" not in first.stderr.decode(), first.stderr.decode()

    stored = await stored_memory(url, minilm, user)
    sent = [(r.kind, r.body.get("response_format"), r.body.get("tool_choice")) for r in recording_proxy.requests]
    assert stored, f"nothing stored; requests: {sent}; stdout: {first.stdout.decode()}; stderr: {first.stderr.decode()}"

    recording_proxy.requests.clear()
    # Only the second process's prompt matters here: its own extraction (a ~1,300-token call) is skipped.
    second = run_cli(["Where do I live?"], url, {**env, "MEMORY_AGENT_EXTRACT_EVERY_N_TURNS": "0"}, user)
    assert second.returncode == 0, second.stderr.decode()
    request = recording_proxy.requests_of("reply")[0].messages
    # The profile and the facts ranked for the message open the message itself.
    user_context = request[-1]["content"]
    assert all(item in user_context for item in stored), (stored, user_context)


async def test_the_reply_streams_token_by_token_from_the_real_server(backend, user_id, real_model):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=real_model, tools=False, extract_every_n_turns=0)
    turn = await stream_turn(graph, "Count from one to ten in words, separated by commas.", new_thread(), ctx)

    assert len(turn.tokens) >= 5  # many chunks, not one block
    assert turn.streamed_reply == turn.final_reply.content and turn.final_reply.content.strip()
    assert turn.other_tokens == []


async def test_a_summary_fold_with_the_real_model_writes_a_valid_board(backend, user_id, real_model):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=real_model, tools=False, extract_every_n_turns=0, summary_window=2, tail_size=1)
    config = new_thread()
    await stream_turn(graph, "I am planning a trip to Rome in May with my sister Noa.", config, ctx)
    turn = await stream_turn(graph, "We want to see the Colosseum and eat good pasta.", config, ctx)

    folds = [e for e in turn.events_of("summary") if "folded_messages" in e]
    assert folds and folds[0]["folded_messages"] > 0, turn.events
    # A valid board and an advanced cursor; an empty board is the 0.5B's choice now and then (seen once in ~5 runs).
    SummaryBoard.model_validate(turn.values["summary"])
    assert turn.values["summarized_through"] and not any("error" in e for e in turn.events_of("summary"))


async def test_a_task_tool_call_asks_for_confirmation_and_yes_adds_the_task(backend, user_id, real_model):
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=real_model, tools=True, extract_every_n_turns=0)  # the local default is off
    config = new_thread()
    # The tool's argument named: at temperature 0 the 0.5B answered the looser "add this task: buy milk" with
    # {"add_task": {"task": "buy milk"}} in a json block (no call: the argument is `description`), every run.
    turn = await stream_turn(graph, 'Call the add_task tool with description "buy milk".', config, ctx)

    asked = [i.value for i in turn.interrupts]
    assert asked and asked[0]["type"] == "task_change" and asked[0]["action"] == "add", turn.values["messages"][-1]
    assert await stored_tasks(backend.store, user_id) == []  # nothing before the answer
    await stream_turn(graph, Command(resume={"approved": True}), config, ctx)
    tasks = await stored_tasks(backend.store, user_id)
    assert [t.description for t in tasks] == [asked[0]["description"]]


async def test_structured_calls_go_through_the_schema_door_and_come_back_valid_the_first_time(real_model, local_server):
    """llama-cpp-python refuses ``json_schema`` (HTTP 500) and makes ``json_object`` + ``schema`` a grammar:
    the 0.5B's extraction and title are valid JSON of their schema, with no repair call. The server
    `memory-agent local` starts is asked through that door first (its env), so nothing is refused."""
    model = load_chat_model(real_model)
    messages = build_extraction_messages("Hi! My name is Dana, I live in Haifa and I work as a nurse.", "Nice to meet you, Dana!", {})
    first = await invoke_structured(model, ExtractionResult, messages)

    assert first.errors == [] and first.method == "json_object_schema" and first.attempts == 1, first
    assert remembered_mode(model) is None  # no refusal to remember
    title = await invoke_structured(model, ChatTitle, [SystemMessage(prompts.text("title")), HumanMessage("We planned a trip to Rome.")])
    assert title.method == "json_object_schema" and title.attempts == 1 and title.calls == 1  # straight to the door that works
    assert title.value.title.strip()


async def test_an_empty_reply_is_asked_again_without_tools_and_the_user_never_sees_a_blank_line(recording_proxy, local_server, backend, user_id):
    """The 0.5B answered three of the four Dana lines with a line of spaces: the proxy gives that answer
    once, the real server answers the second asking."""
    forward = forwarding_responder(local_server)
    blanked: list[StubRequest] = []

    def answer(request: StubRequest) -> StubReply:
        if request.kind == "reply" and not blanked:
            blanked.append(request)
            return StubReply(content="   ")
        return forward(request)

    recording_proxy.reset(answer)
    out, err = io.StringIO(), io.StringIO()
    env = {**local_server.env(), "OPENAI_BASE_URL": recording_proxy.base_url, "MEMORY_AGENT_MAX_REPLY_TOKENS": TEST_REPLY_CAP}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        # Tools offered (the local default is off): the second asking is the one without them.
        overrides = {"model": local_server.model_name, "extract_every_n_turns": 0, "tools": True}
        session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides=overrides)
        with chat_model._lock:
            chat_model._cache.clear()  # a model cached by an earlier test talks to the server, not the proxy
        try:
            reply = await session.send("I prefer short answers.")
        finally:
            with chat_model._lock:
                chat_model._cache.clear()

    replies = recording_proxy.requests_of("reply")
    assert len(replies) == 2 and blanked[0].tools and not replies[1].tools, [r.body for r in replies]
    assert reply and reply.strip() and out.getvalue().strip() == reply.replace("\n", " ").strip(), (out.getvalue(), err.getvalue())


async def test_no_tool_call_json_reaches_the_user(backend, user_id, real_model):
    """The CLI's chat session (what a pipe or a terminal shows) on prompts that invite tool use."""
    out, err = io.StringIO(), io.StringIO()
    # Memory calls are not what this test is about: extraction off keeps it to the reply calls.
    overrides = {"model": real_model, "extract_every_n_turns": 0, "max_tool_steps": 2, "tools": True}  # on: the local default is off
    session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides=overrides)
    for line in ("What tasks do I have? Check with your tools.", "Search our conversation history for the word milk."):
        await session.send(line)
        if await session.pending_confirmation():
            await session.send("no")

    shown = out.getvalue()
    stored = (await session.graph.aget_state(session.config)).values["messages"]
    seen = {"shown": shown, "stored": [(m.type, m.text, getattr(m, "tool_calls", None)) for m in stored]}
    assert not CALL_TEXT.search(shown), seen
    assert not any(CALL_TEXT.search(m.text) for m in stored if m.type == "ai"), seen
    assert len(shown.splitlines()) >= 2, seen  # one line per reply (a reply may be blank)


PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


async def test_the_next_reply_prompt_extends_the_last_one_so_the_server_reads_only_what_changed(recording_proxy, local_server, backend, user_id):
    """Turns in seconds need the stable part first: two turns of a chat through the real graph are
    recorded, then their two reply prompts go to the real server one after the other; the second is
    resumed from the first one's state and only its new tail is read (llama.cpp's own count)."""
    import httpx

    env = {**local_server.env(), "OPENAI_BASE_URL": recording_proxy.base_url, "MEMORY_AGENT_MAX_REPLY_TOKENS": TEST_REPLY_CAP}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        overrides = {"model": local_server.model_name, "extract_every_n_turns": 0}
        session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=io.StringIO(), err=io.StringIO(), context_overrides=overrides)
        with chat_model._lock:
            chat_model._cache.clear()
        try:
            await session.send("Hi! My name is Dana and I work as a nurse in Haifa.")
            turns = len(recording_proxy.requests_of("reply"))
            await session.send("What could I cook tonight?")
        finally:
            with chat_model._lock:
                chat_model._cache.clear()

    replies = recording_proxy.requests_of("reply")
    first, second = replies[0], replies[turns]  # each turn's first reply call
    assert second.messages[: len(first.messages) - 1] == first.messages[:-1]  # the same prefix, message for message

    client = httpx.Client(base_url=local_server.base_url, headers=local_server.headers, timeout=600)

    def send(request: StubRequest) -> dict:
        body = {**request.body, "stream": False, "max_tokens": 1}
        body.pop("stream_options", None)
        return client.post("/chat/completions", json=body).json()

    send(first)
    mark = len(local_server.log())
    usage = send(second)["usage"]
    evaluated = [int(n) for n in PROMPT_EVAL.findall(local_server.log()[mark:])]
    assert evaluated and evaluated[0] < usage["prompt_tokens"] / 2, (evaluated, usage)


def test_the_servers_prompt_cache_counts_the_logits_copy_each_state_keeps_and_evicts_by_it():
    """llama-cpp-python counts only the KV bytes of a cached state; each also keeps ~310 MB of logits,
    and a 0.5B server with a "128 MiB" cache was seen at 9.8 GB. Ours counts every array a state holds."""
    import numpy as np
    from llama_cpp.llama import LlamaState

    from app.local.llama_server import BoundedRAMCache, state_bytes

    def state(first_token: int) -> LlamaState:
        scores = np.zeros((4, 1000), dtype=np.single)  # 16,000 bytes of logits beside 100 bytes of KV state
        return LlamaState(np.array([first_token, 2, 3]), scores, 3, b"k" * 100, 100, 0)

    cache = BoundedRAMCache(capacity_bytes=40_000)
    for token in (1, 5, 9):
        cache[(token, 2, 3)] = state(token)
    assert cache.cache_size == sum(state_bytes(s) for s in cache.cache_state.values()) <= 40_000
    assert list(cache.cache_state) == [(5, 2, 3), (9, 2, 3)]  # the oldest went: two states are ~32 kB, not 200 bytes
