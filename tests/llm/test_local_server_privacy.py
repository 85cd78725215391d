"""The real model server (llama-cpp-python behind app/local/private_server.py) answers only its owner,
names the model by its alias, and with --isolate reads every prompt whole (issue 31, item 3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from app.local.model_server import MODELS, assemble_model, start_server
from app.local.private_server import KEY_ENV
from tests.conftest import REPO_ROOT
from tests.llm.conftest import TEST_CONTEXT, tier_model

pytestmark = pytest.mark.timeout(1800)
PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
CHAT = {"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 1, "temperature": 0}


def test_the_real_server_refuses_a_keyless_request_and_reports_only_its_alias(local_server):
    spec, weights = local_server.spec, str(assemble_model(local_server.spec))
    root = local_server.base_url.removesuffix("/v1")
    with httpx.Client(timeout=600) as client:
        for method, url in (("GET", f"{root}/v1/models"), ("POST", f"{root}/v1/chat/completions"), ("GET", f"{root}/docs"), ("GET", f"{root}/openapi.json")):
            refused = client.request(method, url, json=CHAT if method == "POST" else None)
            assert refused.status_code == 401, (url, refused.text)
            wrong = client.request(method, url, json=CHAT if method == "POST" else None, headers={"Authorization": "Bearer local"})
            assert wrong.status_code == 401, (url, wrong.text)

        keyed = local_server.headers
        models = client.get(f"{root}/v1/models", headers=keyed).json()
        assert [m["id"] for m in models["data"]] == [spec.alias]
        for body in (CHAT, {**CHAT, "model": weights}):  # no model: the library's own answer is the weights' path
            reply = client.post(f"{root}/v1/chat/completions", json=body, headers=keyed)
            assert reply.status_code == 200 and reply.json()["model"] == spec.alias and weights not in reply.text, reply.text
        streamed = client.post(f"{root}/v1/chat/completions", json={**CHAT, "stream": True}, headers=keyed)
        chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
        assert chunks and {c["model"] for c in chunks} == {spec.alias} and weights not in streamed.text

        rebound = client.post(f"{root}/v1/chat/completions", json=CHAT, headers={**keyed, "Host": f"evil.example:{local_server.port}"})
        assert rebound.status_code == 421
        page = client.post(f"{root}/v1/chat/completions", json=CHAT, headers={**keyed, "Origin": "https://evil.example"})
        assert page.status_code == 403 and not [h for h in page.headers if h.startswith("access-control-")]
        preflight = client.options(f"{root}/v1/chat/completions", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize(("host", "key", "refusal"), [("0.0.0.0", "k", "not a loopback address"), ("127.0.0.1", "", KEY_ENV)])
def test_the_server_will_not_start_on_an_open_address_or_without_a_key(host, key, refusal):
    spec = MODELS[tier_model()]
    env = {**os.environ, KEY_ENV: key}
    command = [sys.executable, "-m", "app.local.llama_server", "--model", "unused.gguf", "--model_alias", spec.alias, "--host", host, "--port", "1"]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and refusal in done.stderr, done.stderr


def test_an_isolated_server_reads_every_prompt_whole_so_no_request_is_timed_against_another():
    """With --isolate nothing of an earlier prompt is resumed: the second of two equal prompts is read whole
    (llama.cpp's own count), where the shared server reads one token of it (tests/llm/test_real_model.py)."""
    spec = MODELS[tier_model()]
    server = start_server(spec, assemble_model(spec), n_ctx=TEST_CONTEXT, isolate=True)
    try:
        body = {**CHAT, "messages": [{"role": "user", "content": "The secret code is " + "blue harbour " * 40}]}
        with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=600) as client:
            first = client.post("/chat/completions", json=body).json()["usage"]["prompt_tokens"]
            mark = len(server.log())
            client.post("/chat/completions", json=body)
        evaluated = [int(n) for n in PROMPT_EVAL.findall(server.log()[mark:])]
        assert evaluated and evaluated[0] >= first - 1, (evaluated, first)
    finally:
        server.stop()
