"""Live-server helpers for the HTTP tests: `memory-agent serve` as a subprocess, SSE reading, keys.

The server runs exactly as users run it (``python -m app.cli.main serve``, uvicorn with
several workers) against a real Postgres database of the test session. The only
thing a test may choose is the chat model: ``MEMORY_AGENT_MODEL`` in the server's
environment, and :func:`register_test_models`, loaded into every worker through
``MEMORY_AGENT_MODEL_PLUGINS``, which adds ``http-test``:

- the offline model, except that a user message containing ``[slow]`` is answered
  at 150 ms a word (so a test can stop it mid-stream; :func:`paced_test_model` names the
  same model pacing every reply, for the web page and the fault tests), and
- a message starting with ``[task] <description>`` makes the reply call the
  ``add_task`` tool, which asks for a confirmation (an interrupt);
- a message containing ``[fail]`` makes the reply fail after six streamed words
  (a provider error mid-stream);
- a message containing ``[markdown]`` is answered with :data:`MARKDOWN_REPLY`, Markdown
  as real models write it (headings, lists, code, a table) plus HTML that must not run;
- a structured call (extraction, summary, title) whose input holds ``[paced]`` takes at least
  :data:`PACED_CALL_SECONDS`, so an import of such messages outlasts a few of its beats on any
  machine (a test can stop it part way).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_MODEL = "http-test"
PLUGIN = "tests.support.http_server:register_test_models"
SLOW_CUE, TASK_CUE, FAIL_CUE, MARKDOWN_CUE, PACED_CUE = "[slow]", "[task]", "[fail]", "[markdown]", "[paced]"
PACED_CALL_SECONDS = 0.25
FAILING_REPLY = "Rome, then: old streets, long lunches and good coffee, a fine city to live in and to walk around."
PACED_DELAYS_MS = (60, 300)  # the paced variants registered; add one here to use it
MARKDOWN_CODE = 'def cook(minutes: int = 9) -> str:\n    return f"pasta for {minutes} minutes, stirred every minute so that it never sticks to the pot"'
MARKDOWN_REPLY = f"""## Dinner plan

Here is a **short** plan with `inline code` and ordinary words that should wrap between words, never inside them.

- Monday: *pasta* with tomatoes
- Tuesday: vegetables and rice

1. Boil the water
2. Add the pasta

```python
{MARKDOWN_CODE}
```

| Day | Dish | Notes |
|---|---|---|
| Monday | Pasta | quick |

A long address: https://example.com/a/really/long/path/that/wraps/instead/of/making/the/page/scroll/sideways/0123456789

<script>window.__injected = "script"</script>
<img src="x" onerror="window.__injected = 'onerror'">
<a href="#" onclick="window.__injected = 'onclick'">a handler</a> and [a bad link](javascript:window.__injected='link')
"""


# --------------------------------------------------------------------------- the server-side test model
def _current_user_text(messages) -> str:
    from prompts.reply_prompt import user_words

    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return user_words(human) if human is not None else ""


def _is_chat_reply(messages) -> bool:
    from prompts.reply_prompt import SUMMARY_HEADER

    return any(isinstance(m, SystemMessage) and SUMMARY_HEADER in str(m.content) for m in messages)


def _wants_task(messages) -> str | None:
    """The task description when this reply call should propose one (no tool result yet this turn)."""
    if not _is_chat_reply(messages):
        return None
    last_human = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    if any(isinstance(m, ToolMessage) for m in messages[last_human:]):
        return None
    from prompts.reply_prompt import user_words

    text = user_words(messages[last_human]).strip()
    return text[len(TASK_CUE) :].strip() if text.startswith(TASK_CUE) else None


def paced_test_model(ms: int) -> str:
    """The name of the test model that answers every reply at ``ms`` a word (one of PACED_DELAYS_MS)."""
    if ms not in PACED_DELAYS_MS:
        raise ValueError(f"no paced test model at {ms} ms a word: add it to PACED_DELAYS_MS")
    return f"{TEST_MODEL}-paced-{ms}"


def _make_test_model(paced_ms: int = 0):
    from offline_model.slow_model import SlowOfflineChatModel

    class HttpTestModel(SlowOfflineChatModel):
        model_name: str = TEST_MODEL
        delay_ms: int = 150
        paced_ms: int = 0

        def _respond(self, messages) -> str:
            if _is_chat_reply(messages) and MARKDOWN_CUE in _current_user_text(messages):
                return MARKDOWN_REPLY
            if _is_chat_reply(messages) and FAIL_CUE in _current_user_text(messages):
                return FAILING_REPLY
            return super()._respond(messages)

        def delay_for(self, messages) -> float:
            if not _is_chat_reply(messages):
                return 0.0
            if SLOW_CUE in _current_user_text(messages):
                return self.delay_ms / 1000
            return self.paced_ms / 1000

        def with_structured_output(self, schema, **kwargs):
            from langchain_core.runnables import RunnableLambda

            inner = super().with_structured_output(schema, **kwargs)

            async def paced(model_input):
                messages = self._convert_input(model_input).to_messages()
                if any(PACED_CUE in str(m.content) for m in messages):
                    await asyncio.sleep(PACED_CALL_SECONDS)
                return await inner.ainvoke(model_input)

            return RunnableLambda(inner.invoke, afunc=paced, name=inner.name)

        def _tool_call(self, description: str) -> dict:
            return {"name": "add_task", "args": {"description": description}, "id": f"call_{uuid.uuid4().hex[:8]}"}

        def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
            description = _wants_task(messages)
            if description is None:
                return super()._generate(messages, stop, run_manager, **kwargs)
            message = AIMessage(content="", tool_calls=[self._tool_call(description)])
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _astream(self, messages, stop=None, run_manager=None, **kwargs):
            description = _wants_task(messages)
            if description is None:
                failing = _is_chat_reply(messages) and FAIL_CUE in _current_user_text(messages)
                sent = 0
                async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
                    # Words unlike any earlier reply's, so that they are shown before it fails: a reply that
                    # may still be a repeat of the previous one is held back (llm.reply_checks.EchoHold).
                    if failing and sent == 6:
                        raise RuntimeError("the model provider went away")
                    sent += 1
                    yield chunk
                return
            call = self._tool_call(description)
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[{"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": 0}],
                    chunk_position="last",
                )
            )

    return HttpTestModel(paced_ms=paced_ms, model_name=paced_test_model(paced_ms) if paced_ms else TEST_MODEL)


def register_test_models() -> None:
    from llm.chat_model import register_model

    register_model(TEST_MODEL, _make_test_model())
    for ms in PACED_DELAYS_MS:
        register_model(paced_test_model(ms), _make_test_model(ms))


# --------------------------------------------------------------------------- the server process
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client: httpx builds a new one for each client otherwise (~35-50 ms
    of CPU loading the CA bundle, though the server is plain HTTP), which load_serve's 50 clients
    spent on the same 2 cores as the server they measured."""
    return ssl.create_default_context()


@dataclass
class LiveServer:
    url: str
    database_url: str
    workers: int
    process: subprocess.Popen
    log_path: Path
    local_key: str | None = None
    worker_pids: set[int] = field(default_factory=set)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, key: str | None = None, *, fresh_connections: bool = False, timeout: float = 60) -> httpx.Client:
        """A client for this server; ``fresh_connections`` opens a new TCP connection per request,
        so the kernel may hand each to another worker."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_keepalive_connections=0) if fresh_connections else httpx.Limits()
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, limits=limits, verify=_tls_context())

    def async_client(self, key: str | None = None, *, timeout: float = 120, fresh_connections: bool = False) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0 if fresh_connections else None)
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, limits=limits, verify=_tls_context())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # uvicorn shuts its workers down gracefully
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log_path.unlink(missing_ok=True)


def server_env(database_url: str, model: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PROMETHEUS_MULTIPROC_DIR")}
    env.update(
        {
            "DATABASE_URL": database_url,
            "MEMORY_AGENT_MODEL": model,
            "MEMORY_AGENT_MODEL_PLUGINS": PLUGIN,
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "LANGSMITH_TRACING": "false",
        }
    )
    env.update(extra or {})
    return env


def start_server(
    database_url: str, *, model: str = TEST_MODEL, workers: int = 2, env: dict[str, str] | None = None, timeout: float = 180, port: int | None = None,
    log_level: str = "warning",
) -> LiveServer:
    """Start ``memory-agent serve`` and return once every worker answers /healthz (``port``: to restart one;
    ``log_level="info"`` to see the access log)."""
    port = port or free_port()
    log_path = Path(tempfile.mkstemp(prefix="ma-serve-", suffix=".log")[1])
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log-level", log_level],
        cwd=REPO_ROOT,
        env=server_env(database_url, model, env),
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()  # the child has its own copy of the descriptor
    server = LiveServer(f"http://127.0.0.1:{port}", database_url, workers, process, log_path)
    deadline = time.monotonic() + timeout
    with server.client(fresh_connections=True, timeout=5) as client:
        while len(server.worker_pids) < workers:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}:\n{server.log()}")
            if time.monotonic() > deadline:
                server.stop()
                raise TimeoutError(f"the server's {workers} workers did not all answer within {timeout}s:\n{server.log()}")
            try:
                response = client.get("/healthz")
                if response.status_code == 200:
                    server.worker_pids.add(int(response.headers["x-worker-pid"]))
                    continue
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    found = re.search(r"\b(ma_[0-9a-f]{8}_[A-Za-z0-9_-]+)", server.log())
    server.local_key = found.group(1) if found else None
    return server


def live_server_fixture(database: str, **options):
    """A module-scoped ``server`` fixture: ``start_server`` on a new database named ``database``
    (``options`` as ``start_server``'s), stopped after the module. Assign it as ``server = ...``."""
    import pytest

    @pytest.fixture(scope="module")
    def server(new_database):
        with running_server(new_database(database), **options) as live:
            yield live

    return server


@contextmanager
def running_server(database_url: str, **options) -> Iterator[LiveServer]:
    """``start_server`` (same options), stopped on leaving the block."""
    live = start_server(database_url, **options)
    try:
        yield live
    finally:
        live.stop()


# --------------------------------------------------------------------------- API keys
async def create_keys(database_url: str, users: list[str]) -> dict[str, str]:
    """One API key per user, straight into the server's database."""
    from storage import api_keys
    from storage.postgres import open_pool

    pool = await open_pool(database_url, max_size=2)
    try:
        return {user: await api_keys.create_key(pool, user, "test") for user in users}
    finally:
        await pool.close()


async def revoke_keys(database_url: str, keys: list[str]) -> None:
    """As `memory-agent keys revoke` does, straight in the server's database."""
    from storage import api_keys
    from storage.postgres import open_pool

    pool = await open_pool(database_url, max_size=2)
    try:
        for key in keys:
            assert await api_keys.revoke_key(pool, key)
    finally:
        await pool.close()


def new_user() -> str:
    return f"u{uuid.uuid4().hex[:12]}"


@contextmanager
def new_chat_behind_stub(database_url: str, stub_url: str) -> Iterator[tuple[httpx.Client, str]]:
    """A one-worker server whose model is the OpenAI-compatible stub at ``stub_url``, a new user's
    client and a new chat's id; the server stops on leaving the block."""
    import asyncio

    env = {"OPENAI_BASE_URL": stub_url, "OPENAI_API_KEY": "x"}
    with running_server(database_url, model="openai:stub-http", workers=1, env=env) as server:
        user = new_user()
        key = asyncio.run(create_keys(server.database_url, [user]))[user]
        with server.client(key) as client:
            yield client, client.post("/chats", json={}).json()["chat"]["id"]


async def new_account(server: LiveServer) -> tuple[str, str]:
    """A fresh user of ``server`` and their API key."""
    user = new_user()
    return user, (await create_keys(server.database_url, [user]))[user]


# --------------------------------------------------------------------------- Server-Sent Events
@dataclass
class Event:
    name: str
    data: dict[str, Any]


class _EventFraming:
    """SSE framing, one line at a time, for the sync and the async reader alike."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event a blank line completes; comment lines (":") and other fields are skipped."""
        if line == "":
            event = Event(self.name or "message", json.loads("\n".join(self.data))) if self.data else None
            self.name, self.data = None, []
            return event
        if line.startswith("event:"):
            self.name = line[6:].strip()
        elif line.startswith("data:"):
            self.data.append(line[5:].lstrip(" "))
        return None


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    framing = _EventFraming()
    for line in lines:
        if (event := framing.feed(line)) is not None:
            yield event


def stream(client: httpx.Client, method: str, path: str, body: dict) -> list[Event]:
    """Send a request whose reply is SSE and read the stream to its end (raises for an HTTP error)."""
    with client.stream(method, path, json=body) as response:
        if response.status_code != 200:
            response.read()
            raise HttpError(response)
        return list(parse_events(response.iter_lines()))


async def astream(client: httpx.AsyncClient, method: str, path: str, body: dict) -> list[Event]:
    async with client.stream(method, path, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise HttpError(response)
        return [e async for e in aparse_events(response.aiter_lines())]


async def aparse_events(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    framing = _EventFraming()
    async for line in lines:
        if (event := framing.feed(line)) is not None:
            yield event


class HttpError(Exception):
    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.body = response.json()
        super().__init__(f"{self.status}: {self.body}")


def new_chat(client: httpx.Client, **body) -> str:
    """POST /chats (201 expected); the new chat's id."""
    response = client.post("/chats", json=body)
    assert response.status_code == 201, response.text
    return response.json()["chat"]["id"]


def say(client: httpx.Client, chat_id: str, text: str) -> list[Event]:
    return stream(client, "POST", f"/chats/{chat_id}/messages", {"text": text})


def reply_text(events: list[Event]) -> str:
    """What a client shows of the reply: its tokens, a ``replaced`` event's text in place of what it withdrew."""
    text = ""
    for e in events:
        if e.name == "token":
            text += e.data["text"]
        elif e.name == "replaced":
            withdrawn = e.data["withdrawn"]
            assert text.endswith(withdrawn), (text, withdrawn)
            text = text[: len(text) - len(withdrawn)] + e.data["text"]
    return text


def token_text(events: list[Event]) -> str:
    """The tokens alone: what streamed before any correction."""
    return "".join(e.data["text"] for e in events if e.name == "token")


def final(events: list[Event]) -> Event:
    assert events, "the stream carried no event"
    return events[-1]


class BackgroundStream:
    """Read one SSE reply in a thread, so a test can act (stop, send another message) mid-stream."""

    def __init__(self, server: LiveServer, key: str, method: str, path: str, body: dict) -> None:
        import threading

        self.events: list[Event] = []
        self.worker_pid: int | None = None
        self.error: BaseException | None = None
        self.first_token = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(server, key, method, path, body), daemon=True)
        self._thread.start()

    def _read(self, server: LiveServer, key: str, method: str, path: str, body: dict) -> None:
        try:
            with server.client(key) as client, client.stream(method, path, json=body) as response:
                self.worker_pid = int(response.headers["x-worker-pid"])
                if response.status_code != 200:
                    response.read()
                    raise HttpError(response)
                for event in parse_events(response.iter_lines()):
                    self.events.append(event)
                    if event.name == "token":
                        self.first_token.set()
        except BaseException as exc:  # surfaced by join()
            self.error = exc
        finally:
            self.first_token.set()

    def wait_for_tokens(self, timeout: float = 60) -> None:
        assert self.first_token.wait(timeout), "no token arrived"
        if self.error:
            raise self.error

    def join(self, timeout: float = 60) -> list[Event]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream did not end"
        if self.error:
            raise self.error
        return self.events


@contextmanager
def client_on_worker(server: LiveServer, key: str, pid: int, *, other: bool) -> Iterator[httpx.Client]:
    """A keep-alive client whose connection is served by worker ``pid`` (or by another one, ``other=True``)."""
    for _ in range(200):
        client = server.client(key)
        answered_by = int(client.get("/healthz").headers["x-worker-pid"])
        if (answered_by != pid) == other:
            try:
                yield client
            finally:
                client.close()
            return
        client.close()
    raise AssertionError(f"no connection landed on {'another worker than' if other else 'worker'} {pid}")
