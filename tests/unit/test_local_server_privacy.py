"""The local model server answers only its owner: loopback, the key memory-agent made, no foreign Host or
Origin, no permissive CORS, and the model named by its alias (issue 31, item 3).

The wrapper is tested in front of a stand-in OpenAI-compatible app built the way llama-cpp-python's
``create_app`` builds its own (CORS for every origin with credentials, ``model`` echoed from the
request); tests/llm/test_local_server_privacy.py checks the same on the real server.
"""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.middleware.cors import CORSMiddleware

from app.local import model_server
from app.local.private_server import KEY_ENV, is_loopback_address, new_key, private_app
from core.cache_dir import CACHE_ENV
from tests.support.openai_stub_server import OpenAIStub

ALIAS = "qwen2.5-coder-0.5b-instruct"
WEIGHTS = "/home/dana/.cache/memory-agent/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
KEY = "ma-local-test-key"
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def like_llama_cpp_app(stub: OpenAIStub):
    """The stand-in's app with the CORS middleware llama-cpp-python's create_app adds."""
    stub.app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_credentials=True, allow_methods=["*"], allow_headers=["*"])
    return stub.app


@pytest.fixture
def stub() -> OpenAIStub:
    return OpenAIStub()


@pytest.fixture
def client(stub):
    app = private_app(like_llama_cpp_app(stub), key=KEY, alias=ALIAS)
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8123", headers={"Authorization": f"Bearer {KEY}"})


async def test_a_request_without_the_key_or_with_another_is_401_and_never_reaches_the_model(client, stub):
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer local"}, {"Authorization": f"Bearer {KEY}x"}, {"Authorization": KEY}):
        for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/docs"), ("GET", "/openapi.json")):
            response = await client.request(method, path, json=CHAT if method == "POST" else None, headers=headers)
            assert response.status_code == 401, (headers, path, response.text)
            assert response.json()["error"]["code"] == "invalid_api_key"
    assert stub.requests == []
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_the_key_is_taken_whatever_the_case_of_its_bearer_scheme(client, stub):
    """"bearer <key>" was a 401: an HTTP scheme's case is no part of it (RFC 9110), and some clients send it so."""
    for scheme in ("bearer", "BEARER", "Bearer"):
        response = await client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"{scheme} {KEY}"})
        assert response.status_code == 200, (scheme, response.text)
    assert (await client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Basic {KEY}"})).status_code == 401


async def test_a_foreign_host_is_refused_so_a_dns_rebound_page_cannot_reach_the_model(client, stub):
    for host in ("evil.example:8080", "evil.example", "127.0.0.1.evil.example:8123", "localhost.evil.example", "192.168.1.5:8123", ""):
        response = await client.post("/v1/chat/completions", json=CHAT, headers={"Host": host})
        assert response.status_code == 421, (host, response.text)
    assert stub.requests == []
    for host in ("127.0.0.1:8123", "localhost:8123", "LOCALHOST", "[::1]:8123"):
        assert (await client.post("/v1/chat/completions", json=CHAT, headers={"Host": host})).status_code == 200, host


async def test_a_foreign_origin_is_refused_and_no_cors_header_is_ever_sent(client, stub):
    for origin in ("https://evil.example", "http://localhost:3000", "null", "http://127.0.0.1:8124"):
        response = await client.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin})
        assert response.status_code == 403, (origin, response.text)
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]
        preflight = await client.options(
            "/v1/chat/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
        )
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    assert stub.requests == []
    # The server's own origin (its /docs page) may call, still with the key and still without CORS headers.
    same = await client.post("/v1/chat/completions", json=CHAT, headers={"Origin": "http://127.0.0.1:8123"})
    assert same.status_code == 200 and not [h for h in same.headers if h.lower().startswith("access-control-")]
    assert CORSMiddleware not in [m.cls for m in stub.app.user_middleware]  # the library's allow-all CORS is gone, not only hidden


async def test_every_reply_names_the_models_alias_never_the_weights_path(client, stub):
    for body in (CHAT, {**CHAT, "model": WEIGHTS}, {**CHAT, "model": "gpt-4o"}, {**CHAT, "model": None}):
        reply = await client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200 and reply.json()["model"] == ALIAS, reply.text
    streamed = await client.post("/v1/chat/completions", json={**CHAT, "model": WEIGHTS, "stream": True})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert chunks and {c["model"] for c in chunks} == {ALIAS}
    assert WEIGHTS not in streamed.text
    assert [r.body["model"] for r in stub.requests] == [ALIAS] * 5  # what the model server itself was asked


async def test_a_body_past_the_limit_is_413_before_the_model_sees_it(client, stub):
    response = await client.post("/v1/chat/completions", content=b"{" + b" " * (5 << 20) + b"}", headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and stub.requests == []


def test_the_server_is_bound_only_to_a_loopback_address():
    assert all(map(is_loopback_address, ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]")))
    assert not any(map(is_loopback_address, ("0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.com", "")))


def test_each_server_start_has_its_own_key_and_the_agent_uses_it(tmp_path):
    keys = {new_key() for _ in range(100)}
    assert len(keys) == 100 and all(len(k) >= 40 for k in keys)
    a, b = (model_server.LocalServer(model_server.MODELS["0.5b"], process=None, port=1234, log_path=tmp_path / "log") for _ in range(2))
    assert a.key != b.key
    assert a.env()["OPENAI_API_KEY"] == a.key != "local" and a.headers == {"Authorization": f"Bearer {a.key}"}
    assert a.key not in repr(a)


def test_the_key_reaches_the_server_in_its_environment_not_its_command_line(tmp_path, monkeypatch):
    """Any local user can read a process's command line (ps, /proc/PID/cmdline); its environment only its owner."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    started: dict = {}

    class Exited:
        returncode = 2

        def __init__(self, command, **options):
            started.update(command=command, env=options["env"])

        def poll(self):
            return self.returncode

    monkeypatch.setattr(model_server.subprocess, "Popen", Exited)
    with pytest.raises(model_server.LocalModelError):
        model_server.start_server(model_server.MODELS["0.5b"], tmp_path / "model.gguf", port=1234)
    key = started["env"][KEY_ENV]
    assert key.startswith("ma-local-") and not any(key in part for part in started["command"])
    assert started["command"][started["command"].index("--host") + 1] == "127.0.0.1"


async def test_the_agents_own_client_gets_through_with_the_key_and_another_client_without_it_does_not():
    """The openai SDK, as the agent uses it (OPENAI_API_KEY = the key), against the wrapper served on a port."""
    import openai

    stub = OpenAIStub()
    stub.app = private_app(like_llama_cpp_app(stub), key=KEY, alias=ALIAS)
    stub.start()
    try:
        agent = openai.AsyncOpenAI(base_url=stub.base_url, api_key=KEY, max_retries=0)
        reply = await agent.chat.completions.create(model="anything", messages=CHAT["messages"])
        assert reply.model == ALIAS and reply.choices[0].message.content == "stub reply"
        with pytest.raises(openai.AuthenticationError, match="valid API key"):
            await openai.AsyncOpenAI(base_url=stub.base_url, api_key="local", max_retries=0).models.list()
    finally:
        stub.stop()
