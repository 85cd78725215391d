"""The real-model tier: a llama-cpp-python server with Qwen2.5-Coder (0.5B unless MEMORY_AGENT_LOCAL_MODEL says 1.5b;
the chat's default is the 1.5B, the tier's the smallest model, the hardest case for the reply checks).

`make test-llm` prepares the runtime and the model first (`memory-agent local prepare`),
so the slow build never runs inside a test's timeout. The tests assert mechanics (what
is stored, sent, streamed and shown), never the model's wording.
"""

from __future__ import annotations

import json
import os
from typing import Iterator

import httpx
import pytest

from app.local.model_server import MODELS, LocalServer, assemble_model, runtime_installed, start_server
from tests.support.openai_stub_server import OpenAIStub, StubReply, StubRequest, StubToolCall


# Replies in this tier are short questions' answers; a model that loops stops here, not at 1,024 tokens
# (every reply token is also read again by the next call's prompt: a fold, a title, the next turn).
TEST_REPLY_CAP = "128"
# The tier's longest call is ~1,300 prompt tokens plus a 1,200-token output cap: 4k holds it (8k is the default).
TEST_CONTEXT = 4096


# The tier's model when MEMORY_AGENT_LOCAL_MODEL is unset (`make test-llm` sets it from TEST_LOCAL_MODEL).
TIER_MODEL = "0.5b"


def tier_model() -> str:
    return os.environ.get("MEMORY_AGENT_LOCAL_MODEL", TIER_MODEL)


@pytest.fixture(scope="session")
def local_server() -> Iterator[LocalServer]:
    spec = MODELS[tier_model()]
    if not runtime_installed():
        pytest.fail("llama-cpp-python is not installed: run `make test-llm` (it runs `memory-agent local prepare` first)")
    server = start_server(spec, assemble_model(spec), n_ctx=TEST_CONTEXT)
    yield server
    server.stop()


@pytest.fixture
def real_model(local_server, monkeypatch) -> str:
    """The init_chat_model string of the real server, with OPENAI_BASE_URL pointing at it for this test."""
    from llm import chat_model
    from llm.structured import forget_modes

    for key, value in local_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MEMORY_AGENT_MAX_REPLY_TOKENS", TEST_REPLY_CAP)
    forget_modes()
    with chat_model._lock:
        chat_model._cache.clear()
    yield local_server.model_name
    forget_modes()
    with chat_model._lock:
        chat_model._cache.clear()


def forwarding_responder(server: LocalServer):
    """A stub script that asks the real server (non-streaming) and answers with what it said.

    The stub then records every request, so a test can read the exact prompt a process sent.
    """
    client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=600)

    def answer(request: StubRequest) -> StubReply:
        body = {**request.body, "stream": False}
        body.pop("stream_options", None)
        response = client.post("/chat/completions", json=body)
        if response.status_code >= 400:
            error = response.json().get("error", {})
            message = error.get("message", response.text) if isinstance(error, dict) else str(error)
            return StubReply(error_status=response.status_code, error_message=message)
        message = response.json()["choices"][0]["message"]
        calls = [
            StubToolCall(c["function"]["name"], c["function"]["arguments"], c.get("id") or f"call_{i}")
            for i, c in enumerate(message.get("tool_calls") or [])
        ]
        return StubReply(content=message.get("content"), tool_calls=calls)

    return answer


@pytest.fixture
def recording_proxy(local_server) -> Iterator[OpenAIStub]:
    """An OpenAI-compatible proxy in front of the real server that records each request."""
    proxy = OpenAIStub().start()
    proxy.reset(forwarding_responder(local_server))
    yield proxy
    proxy.stop()


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
