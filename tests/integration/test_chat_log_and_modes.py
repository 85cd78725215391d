"""Log records go to the chat's log file, and a server's refusal of a structured-output mode is learned once, for good.

Behind a server that refuses ``json_schema`` as llama-cpp-python's does (HTTP 500), the chat printed
``WARNING llm.structured: … refused structured output mode auto …`` and ``dropped 2 fact(s)…`` into
the conversation, again in every new process, and sent the refused mode three times a process (the
SDK retries a 500). Here: 5 turns across two CLI processes, and in-process with a fresh state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from core.schemas import ChatTitle
from llm import server_modes
from llm.chat_model import load_chat_model
from llm.structured import forget_modes, invoke_structured, remembered_mode
from tests.conftest import REPO_ROOT
from tests.support.openai_stub_server import (  # noqa: F401 (pytest fixtures)
    StubRequest,
    openai_stub,
    openai_stub_server,
    structured_answer,
    structured_mode,
)

EMPTY = {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []}


mode_of = structured_mode


def answer(request: StubRequest):
    if request.kind == "extract":
        # Two facts the user never said: the extraction drops them, and says so in a log record.
        invented = [{"text": "Owns a red bicycle"}, {"text": "Plays the cello every Sunday"}]
        return structured_answer(request, {**EMPTY, "new_facts": invented})
    if request.kind == "title":
        return structured_answer(request, {"title": "Garden plans"})
    if request.kind == "fold":
        return structured_answer(request, {"summary": "Garden plans."})
    return "Noted."


def run_chat(lines: list[str], env: dict[str, str], user: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat", "--user", user],
        input="".join(f"{line}\n" for line in lines).encode(),
        capture_output=True, cwd=REPO_ROOT, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
async def test_five_turns_in_two_processes_show_no_warning_and_send_the_refused_mode_once(
    backend, user_id, openai_stub, tmp_path
):
    openai_stub.like_llama_cpp()
    openai_stub.responder = answer
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_AGENT_STRUCTURED_OUTPUT"}
    env.update(
        DATABASE_URL=backend.url,
        OPENAI_BASE_URL=openai_stub.base_url,
        OPENAI_API_KEY="x",
        MEMORY_AGENT_MODEL=f"openai:stub-{uuid.uuid4().hex[:8]}",
        MEMORY_AGENT_STATE_DIR=str(tmp_path / "state"),
        MEMORY_AGENT_CACHE=str(tmp_path / "cache"),
    )
    first = run_chat(["I am planting tulips.", "The garden is behind the house.", "It gets sun all morning."], env, user_id)
    second = run_chat(["Should I add roses?", "And a bench?"], env, user_id)

    for done in (first, second):
        assert done.returncode == 0, done.stderr.decode()
        shown = done.stdout.decode() + done.stderr.decode()
        assert "WARNING" not in shown and "refused" not in shown and "dropped" not in shown, shown
        assert done.stdout.decode().splitlines() == ["Noted."] * len(done.stdout.decode().splitlines())
    assert len(first.stdout.decode().splitlines()) == 3 and len(second.stdout.decode().splitlines()) == 2

    modes = [mode_of(r) for r in openai_stub.requests if r.kind != "reply"]
    assert modes.count("json_schema") <= 1, modes  # learned at the first try, kept for the second process
    assert set(modes) - {"json_schema"} == {"json_object_schema"}
    log = (tmp_path / "state" / "log" / "chat.log").read_text()
    assert log.count("refused structured output mode") == modes.count("json_schema")
    assert "dropped 2 fact(s)" in log
    kept = json.loads((tmp_path / "cache" / "structured-output.json").read_text())
    assert [sorted(e["refused"]) for e in kept["servers"]] == [["auto"]]


@pytest.fixture
def capability_file(tmp_path):
    forget_modes()
    server_modes.keep_in(tmp_path / "structured-output.json")
    yield tmp_path / "structured-output.json"
    server_modes.keep_in(None)
    forget_modes()


TITLE_CALL = [SystemMessage("Title this chat."), HumanMessage("We planned a trip to Rome.")]


@pytest.mark.slow
async def test_a_refused_mode_is_sent_once_and_a_fresh_process_state_starts_at_the_mode_that_works(
    openai_stub, capability_file
):
    openai_stub.like_llama_cpp()
    openai_stub.responder = lambda r: structured_answer(r, {"title": "Trip to Rome"})
    name = f"openai:stub-{uuid.uuid4().hex[:8]}"
    first = await invoke_structured(load_chat_model(name), ChatTitle, TITLE_CALL)
    assert first.method == "json_object_schema" and first.value.title == "Trip to Rome"
    assert [mode_of(r) for r in openai_stub.requests] == ["json_schema", "json_object_schema"]  # no retries of the refusal

    server_modes._known.clear()  # what a new process knows: only the file
    server_modes.keep_in(capability_file)
    assert remembered_mode(load_chat_model(name)) == "json_object_schema"
    openai_stub.requests.clear()
    second = await invoke_structured(load_chat_model(name), ChatTitle, TITLE_CALL)
    assert second.method == "json_object_schema" and second.errors == []
    assert [mode_of(r) for r in openai_stub.requests] == ["json_object_schema"]


async def test_a_first_try_that_fails_otherwise_is_sent_again_with_the_clients_retries(openai_stub, capability_file):
    """The first try of a mode goes without retries (so a refusal is sent once); an overloaded server still gets them."""
    from tests.support.openai_stub_server import StubReply

    answers = iter([StubReply(error_status=503, error_message="busy"), StubReply(content=json.dumps({"title": "Rome"}))])
    openai_stub.responder = lambda r: next(answers)
    result = await invoke_structured(load_chat_model(f"openai:stub-{uuid.uuid4().hex[:8]}"), ChatTitle, TITLE_CALL)
    assert result.value.title == "Rome" and result.method == "auto"
    assert [mode_of(r) for r in openai_stub.requests] == ["json_schema", "json_schema"]


async def test_an_unreadable_capability_file_is_learned_again_not_an_error(openai_stub, tmp_path):
    path = tmp_path / "structured-output.json"
    path.write_text("{not json")
    forget_modes()
    try:
        server_modes.keep_in(path)
        openai_stub.like_llama_cpp()
        openai_stub.responder = lambda r: structured_answer(r, {"title": "Trip to Rome"})
        result = await invoke_structured(load_chat_model(f"openai:stub-{uuid.uuid4().hex[:8]}"), ChatTitle, TITLE_CALL)
        assert result.value.title == "Trip to Rome"
        assert json.loads(path.read_text())["servers"][0]["refused"].keys() == {"auto"}
    finally:
        server_modes.keep_in(None)
        forget_modes()


def test_the_local_server_memory_agent_starts_is_asked_through_its_schema_door_first(monkeypatch):
    """llama-cpp-python's server refuses json_schema every time: `memory-agent local` says so up front."""
    from app.local.model_server import MODELS, LocalServer

    monkeypatch.delenv("MEMORY_AGENT_STRUCTURED_OUTPUT", raising=False)
    server = LocalServer(MODELS["0.5b"], process=None, port=8123, log_path=Path("/dev/null"))  # type: ignore[arg-type]
    assert server.env()["MEMORY_AGENT_STRUCTURED_OUTPUT"] == "json_object_schema"
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "text")  # the user's choice stays theirs
    assert server.env()["MEMORY_AGENT_STRUCTURED_OUTPUT"] == "text"
