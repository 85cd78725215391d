"""Tool calls a model writes as text (as Qwen2.5 0.5B/1.5B do behind llama-cpp-python) over the real client path.

A call of a bound tool with valid arguments runs as that call; anything else shaped
like a call never reaches the user: not in the CLI's output, not in the HTTP token
stream, not in the stored reply. The stub streams the text word by word, as a server does.
"""

from __future__ import annotations

import io
import json
import uuid

import pytest
from langchain_core.messages import ToolMessage

from app.cli.chat_session import ChatSession
from core.context import Context
from llm.text_tool_calls import NO_TOOLS_INSTRUCTION
from memory.writer.extraction import apply_extraction
from core.schemas import ExtractionResult
from memory.user_memory import stored_tasks
from tests.support.openai_stub_server import (  # noqa: F401 (pytest fixtures)
    StubRequest,
    openai_stub,
    openai_stub_server,
    replies_only,
    tool_call,
)

RECALL = {"name": "recall_context", "arguments": {"context_type": "facts"}}
WRITTEN = {
    "bare": json.dumps(RECALL),
    "fenced": "Let me check.\n```json\n" + json.dumps(RECALL, indent=2) + "\n```",
    "tagged": "<tool_call>\n" + json.dumps(RECALL) + "\n</tool_call>",
    "openai-shaped": json.dumps([{"type": "function", "function": {"name": "recall_context", "arguments": json.dumps({"context_type": "facts"})}}]),
}


script = replies_only


def tool_results(request: StubRequest) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "tool"]


@pytest.fixture
def cli(backend, user_id, openai_stub):
    """The CLI's chat session from a pipe (one reply per stdout line) on a stub-backed model."""

    def make(**context) -> tuple[ChatSession, io.StringIO, io.StringIO]:
        out, err = io.StringIO(), io.StringIO()
        overrides = {"model": f"openai:stub-{uuid.uuid4().hex[:8]}", **context}
        return ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides=overrides), out, err

    return make


@pytest.mark.slow
@pytest.mark.parametrize("form", list(WRITTEN))
async def test_a_call_written_as_text_runs_as_that_call_and_its_json_is_never_printed(cli, backend, user_id, openai_stub, form):
    await apply_extraction(backend.store, user_id, ExtractionResult.model_validate({"new_facts": [{"text": "Is allergic to peanuts"}]}))
    openai_stub.reset(script(lambda r: f"You told me: {tool_results(r)[-1]}" if tool_results(r) else WRITTEN[form]))
    session, out, _ = cli()
    reply = await session.send("What do you know about me?")

    prose = "Let me check.\n" if form == "fenced" else ""  # the words around a fenced call stay
    assert reply == prose + "You told me: - Is allergic to peanuts"
    assert "recall_context" not in out.getvalue() and "{" not in out.getvalue()
    first, second = openai_stub.requests_of("reply")
    assert second.messages[-2]["tool_calls"][0]["function"]["name"] == "recall_context"
    assert tool_results(second) == ["- Is allergic to peanuts"]
    stored = (await session.graph.aget_state(session.config)).values["messages"]
    assert [type(m).__name__ for m in stored[-3:]] == ["AIMessage", "ToolMessage", "AIMessage"]
    assert stored[-3].tool_calls[0]["args"] == {"context_type": "facts"} and "{" not in stored[-3].text


@pytest.mark.slow
async def test_a_task_written_as_text_asks_for_confirmation_and_yes_adds_it_once(cli, backend, user_id, openai_stub):
    call = '<tool_call>\n{"name": "add_task", "arguments": {"description": "Renew passport"}}\n</tool_call>'
    openai_stub.reset(script(lambda r: f"Done: {tool_results(r)[-1]}" if tool_results(r) else call))
    session, out, err = cli()
    await session.send("Remind me to renew my passport.")
    assert "Confirm: add task 'Renew passport'? [yes/no]" in err.getvalue()
    assert await stored_tasks(backend.store, user_id) == [] and "<tool_call>" not in out.getvalue()

    await session.send("yes")
    assert [t.description for t in await stored_tasks(backend.store, user_id)] == ["Renew passport"]
    assert "tool_call" not in out.getvalue()


@pytest.mark.parametrize(
    "written",
    [
        '{"name": "delete_everything", "arguments": {}}',  # no such tool
        '```json\n{"name": "recall_context", "arguments": {"context_type": "weather"}}\n```',  # invalid argument
        "<tool_call>\n{\"name\": \"add_task\", \"arguments\": {\"description\": \n</tool_call>",  # broken JSON
    ],
)
@pytest.mark.slow
async def test_a_call_shaped_text_that_is_not_a_valid_call_is_never_shown_and_a_plain_answer_is_asked(cli, openai_stub, written):
    def reply(request: StubRequest):
        return "Here is a plain answer." if NO_TOOLS_INSTRUCTION in request.messages[0]["content"] else written

    openai_stub.reset(script(reply))
    session, out, _ = cli()
    assert await session.send("Do something.") == "Here is a plain answer."
    assert out.getvalue() == "Here is a plain answer.\n"
    first, again = openai_stub.requests_of("reply")
    assert first.tools and not again.tools  # asked again without tools
    values = (await session.graph.aget_state(session.config)).values
    assert values["messages"][-1].text == "Here is a plain answer."
    assert not any(isinstance(m, ToolMessage) for m in values["messages"])
    assert values["turn_usage"]["model_calls"] == 2


@pytest.mark.slow
async def test_an_empty_reply_after_a_tool_result_is_asked_again_without_the_tool_steps_their_results_in_the_instructions(cli, openai_stub):
    """The 0.5B answered nothing after every tool result, and again when asked with the tool
    messages still there; asked without them, the lookup told in the instructions, it answers."""

    def reply(request: StubRequest):
        if NO_TOOLS_INSTRUCTION in request.messages[0]["content"]:
            has_tool_steps = any(m["role"] == "tool" or m.get("tool_calls") for m in request.messages)
            return "   " if has_tool_steps else "Nothing stored about that yet."
        if not tool_results(request):
            return tool_call(RECALL["name"], RECALL["arguments"])
        return "   "  # silent after the tool's result

    openai_stub.reset(script(reply))
    session, out, _ = cli()
    assert await session.send("What do you know about me?") == "Nothing stored about that yet."
    again = openai_stub.requests_of("reply")[-1]
    assert not again.tools and not any(m["role"] == "tool" for m in again.messages)
    assert "What your lookups for this message returned:" in again.messages[0]["content"]


async def test_a_model_that_writes_a_call_again_gets_a_fixed_reply_not_its_json(cli, openai_stub):
    openai_stub.reset(script(lambda r: '{"name": "nope", "arguments": {"x": 1}}'))
    session, out, _ = cli()
    reply = await session.send("Hi")
    assert reply and "nope" not in out.getvalue() and "{" not in out.getvalue()


async def test_tools_can_be_turned_off_by_a_setting(cli, openai_stub, monkeypatch):
    openai_stub.reset(script(lambda r: "Plain."))
    session, _, _ = cli(tools=False)
    assert await session.send("What do you know about me?") == "Plain."
    (request,) = openai_stub.requests_of("reply")
    assert not request.tools and "tool_choice" not in request.body

    monkeypatch.setenv("MEMORY_AGENT_TOOLS", "off")
    assert Context().tools is False and Context.from_mapping({"tools": "true"}).tools is True


@pytest.mark.slow
async def test_a_json_answer_the_user_asked_for_is_shown(cli, openai_stub):
    answer = 'Here it is: {"city": "Haifa", "country": "Israel"}'
    openai_stub.reset(script(lambda r: answer))
    session, out, _ = cli()
    assert await session.send("Give me a JSON example.") == answer
    assert out.getvalue() == answer + "\n"


@pytest.mark.slow
def test_the_http_token_stream_never_carries_a_call_written_as_text(new_database, openai_stub):
    """The chat API (and so the web page) streams tokens through the same filter as the CLI."""
    from tests.support.http_server import final, new_chat_behind_stub, reply_text, stream

    tagged = '<tool_call>\n{"name": "recall_context", "arguments": {"context_type": "tasks"}}\n</tool_call>'
    openai_stub.reset(script(lambda r: f"Your tasks: {tool_results(r)[-1]}" if tool_results(r) else tagged))
    with new_chat_behind_stub(new_database("texttools"), openai_stub.base_url) as (client, chat_id):
        events = stream(client, "POST", f"/chats/{chat_id}/messages", {"text": "What are my tasks?"})
    assert reply_text(events) == final(events).data["reply"] == "Your tasks: No tasks."
    assert not any("tool_call" in e.data.get("text", "") for e in events if e.name == "token")


async def test_a_tool_loop_completes_on_a_server_as_strict_as_llama_cpp(cli, openai_stub):
    """It refuses (HTTP 500) an assistant message with null content, which is how a tool-only message was sent."""
    openai_stub.reset(script(lambda r: f"Facts: {tool_results(r)[-1]}" if tool_results(r) else WRITTEN["tagged"]))
    openai_stub.like_llama_cpp()
    session, out, err = cli()
    assert await session.send("What do you know about me?") == "Facts: No facts stored."
    call_message = openai_stub.requests_of("reply")[-1].messages[-2]
    assert call_message["role"] == "assistant" and call_message["content"] == "" and call_message["tool_calls"]


async def test_a_reply_cap_rides_on_the_reply_call(cli, openai_stub):
    """Small local models can loop until their context is full: `memory-agent local` caps replies."""
    openai_stub.reset(script(lambda r: "Short."))
    session, _, _ = cli(max_reply_tokens=256)
    await session.send("Hi")
    (request,) = openai_stub.requests_of("reply")
    assert request.body["max_tokens"] == 256 and request.body["max_completion_tokens"] == 256
