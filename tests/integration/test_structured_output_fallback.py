"""Structured output adapts to what an OpenAI-compatible server accepts, and is always capped.

The stub plays llama-cpp-python's server (HTTP 500 on a ``json_schema`` response
format), a server that ignores a forced tool, and a small model's shapes; the
client path (langchain-openai, the openai SDK, HTTP) is the real one.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

import prompts
from graph.assembly import compile_graph
from core.context import Context
from llm.chat_model import load_chat_model
from llm.structured import forget_modes, invoke_structured, remembered_mode
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard
from memory.summarizer import make_title
from memory.user_memory import list_facts
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.openai_stub_server import (  # noqa: F401 (pytest fixtures)
    StubReply,
    StubRequest,
    StubToolCall,
    openai_stub,
    openai_stub_server,
    structured_answer,
    structured_mode,
    tool_call,
)

EMPTY = {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []}


@pytest.fixture
def openai_model(openai_stub) -> str:
    forget_modes()
    yield f"openai:stub-{uuid.uuid4().hex[:8]}"
    forget_modes()


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


mode_of = structured_mode


def extraction_script(value: dict):
    def answer(request: StubRequest):
        if request.kind == "extract":
            return structured_answer(request, value)
        if request.kind == "title":
            return structured_answer(request, {"title": "About the user"})
        return "Noted."

    return answer


@pytest.mark.slow
async def test_a_server_refusing_both_schema_doors_falls_back_to_function_calling_and_the_fact_is_stored(
    graph, backend, user_id, openai_stub, openai_model, caplog
):
    openai_stub.like_llama_cpp(takes_schema=False)
    openai_stub.responder = extraction_script({**EMPTY, "new_facts": [{"text": "Lives in Haifa"}]})
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    with caplog.at_level(logging.WARNING, logger="llm.structured"):
        turn = await stream_turn(graph, "I live in Haifa.", config, ctx)
        await stream_turn(graph, "I work as a nurse.", config, ctx)

    # The second turn's script repeats Haifa; the rules under the model keep the nurse.
    assert sorted(f.text for f in await list_facts(backend.store, user_id)) == ["Lives in Haifa", "Works as a nurse"]
    assert turn.values["memory_written"]["facts_added"] == ["Lives in Haifa"]
    # The first structured call of the process (the new chat's title) is refused (each new mode is tried
    # once, without the SDK's retries of a 500), then the forced tool works; every later call starts there.
    structured = [mode_of(r) for r in openai_stub.requests if r.kind in ("title", "extract")]
    first_ok = structured.index("function_calling")
    assert first_ok > 0 and set(structured[:first_ok]) == {"json_schema", "json_object_schema"}
    assert set(structured[first_ok:]) == {"function_calling"}
    assert [mode_of(r) for r in openai_stub.requests_of("extract")][-2:] == ["function_calling", "function_calling"]
    assert remembered_mode(load_chat_model(openai_model)) == "function_calling"
    refusals = [r for r in caplog.records if "refused structured output mode" in r.getMessage()]
    assert len(refusals) == 2 and all("response_format" in r.getMessage() for r in refusals)


def grammar_script(value_of: dict):
    """A small model behind llama-cpp-python: prose and broken JSON, unless the request carries
    a schema, which the server's grammar holds its reply to (valid JSON of that schema)."""

    def answer(request: StubRequest):
        if request.kind == "reply":
            return "Noted."
        if request.schema is None:
            return 'Sure! {"name": "add_task", "arguments": {'  # what the 0.5B wrote unconstrained
        return json.dumps(value_of[request.schema["title"]])

    return answer


@pytest.mark.slow
async def test_on_a_llama_cpp_server_every_structured_call_goes_through_its_schema_door(
    graph, backend, user_id, openai_stub, openai_model
):
    """Extraction, fold and title all come back as valid JSON of their schema, with no repair call."""
    openai_stub.like_llama_cpp()
    openai_stub.responder = grammar_script(
        {
            "ExtractionResult": {**EMPTY, "new_facts": [{"text": "Works as a nurse"}], "profile_updates": {"name": "Dana"}},
            "SummaryBoard": {"summary": "Dana introduced herself.", "entities": ["Dana", "Haifa"]},
            "ChatTitle": {"title": "Dana in Haifa"},
        }
    )
    ctx, config = Context(user_id=user_id, model=openai_model, summary_window=2, tail_size=1), new_thread()
    await stream_turn(graph, "Hi, I am Dana and I live in Haifa.", config, ctx)
    turn = await stream_turn(graph, "I work as a nurse.", config, ctx)

    structured = [r for r in openai_stub.requests if r.kind in ("title", "extract", "fold")]
    assert {r.kind for r in structured} == {"title", "extract", "fold"}
    refused = [r for r in structured if mode_of(r) == "json_schema"]
    accepted = structured[len(refused) :]
    # Once (a mode's first try goes without the SDK's retries): the refusal is remembered.
    assert refused == structured[: len(refused)] and len({r.kind for r in refused}) == 1
    assert {mode_of(r) for r in accepted} == {"json_object_schema"} and not any(r.is_repair for r in accepted)
    assert {r.schema["title"] for r in accepted} == {"ExtractionResult", "SummaryBoard", "ChatTitle"}
    # The 800-token schema is the server's to enforce: the prompt does not carry it.
    assert not any("validates against this JSON schema" in r.text_of("system") for r in accepted)
    assert "Works as a nurse" in [f.text for f in await list_facts(backend.store, user_id)]
    assert turn.values["summary"]["summary"] == "Dana introduced herself."
    assert remembered_mode(load_chat_model(openai_model)) == "json_object_schema"


async def test_on_a_llama_cpp_server_the_repair_goes_through_the_schema_door_too(openai_stub, openai_model):
    """The tier's 0.5B cut a fold's board at its output cap; the repair, sent without the schema,
    came back as broken JSON and the fold was lost ("invalid twice")."""
    openai_stub.like_llama_cpp()
    calls: list[StubRequest] = []

    def answer(request: StubRequest):
        calls.append(request)
        if request.schema is None:
            return '{"title": "Trip to Rome" "oops"'  # unconstrained: broken
        return '{"title": "Trip' if not request.is_repair else json.dumps({"title": "Trip to Rome"})

    openai_stub.responder = answer
    model = load_chat_model(openai_model)
    messages = [SystemMessage("Title this chat."), HumanMessage("We planned a trip to Rome.")]
    result = await invoke_structured(model, ChatTitle, messages)
    assert result.value.title == "Trip to Rome" and result.attempts == 2
    repair = [r for r in calls if r.is_repair]
    assert len(repair) == 1 and mode_of(repair[0]) == "json_object_schema" and repair[0].schema["title"] == "ChatTitle"


async def test_when_the_schema_door_is_cut_twice_the_forced_tool_gets_one_last_try(openai_stub, openai_model):
    """The tier's 0.5B looped inside a string through the grammar, cut at the cap on the call and
    on its repair: the fold was lost. The forced tool (the next door) answers it."""
    openai_stub.like_llama_cpp()
    modes: list[str] = []

    def answer(request: StubRequest):
        modes.append(mode_of(request))
        if mode_of(request) == "json_object_schema":
            return '{"title": "Trip to Rome, Rome, Rome, Rome'  # cut inside the string
        return structured_answer(request, {"title": "Trip to Rome"})

    openai_stub.responder = answer
    model = load_chat_model(openai_model)
    messages = [SystemMessage("Title this chat."), HumanMessage("We planned a trip to Rome.")]
    result = await invoke_structured(model, ChatTitle, messages)
    assert result.value.title == "Trip to Rome" and result.attempts == 3
    assert modes[-3:] == ["json_object_schema", "json_object_schema", "function_calling"]
    assert remembered_mode(model) == "json_object_schema"  # the door stays first for the next call


async def test_the_remembered_mode_is_per_model_and_server(openai_stub, openai_model):
    openai_stub.like_llama_cpp()
    openai_stub.responder = lambda r: structured_answer(r, {"title": "Trip to Rome"})
    refused_here = load_chat_model(openai_model)
    messages = [SystemMessage("Title this chat."), HumanMessage("We planned a trip to Rome.")]
    first = await invoke_structured(refused_here, ChatTitle, messages)
    assert first.value.title == "Trip to Rome" and first.method == "json_object_schema"
    assert first.attempts == 1 and any("refused" in e for e in first.errors)

    other = load_chat_model(f"openai:other-{uuid.uuid4().hex[:6]}")  # same server, another model
    assert remembered_mode(other) is None
    openai_stub.reset(lambda r: structured_answer(r, {"title": "Trip to Rome"}))
    second = await invoke_structured(other, ChatTitle, messages)
    assert second.method == "auto" and mode_of(openai_stub.requests[-1]) == "json_schema"


async def test_a_server_ignoring_a_forced_tool_falls_back_to_json_object(openai_stub, openai_model):
    openai_stub.like_llama_cpp(takes_schema=False)
    openai_stub.honours_tool_choice = False

    def answer(request: StubRequest):
        if mode_of(request) == "function_calling":
            return StubReply(content="Sure, here is a title for the chat: Trip to Rome")  # no call, no JSON
        return structured_answer(request, {"title": "Trip to Rome"})

    openai_stub.responder = answer
    model = load_chat_model(openai_model)
    result = await make_title(model, SummaryBoard(summary="Planning a trip to Rome.", topics=["rome"]))

    assert result.value == ChatTitle(title="Trip to Rome") and result.method == "json_mode"
    modes = [mode_of(r) for r in openai_stub.requests]
    assert modes[-2:] == ["function_calling", "json_object"]
    assert remembered_mode(model) == "json_mode"


async def test_a_forced_tool_answered_as_json_text_is_taken_without_another_call(openai_stub, openai_model, monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "function_calling")
    openai_stub.honours_tool_choice = False  # the stub writes the forced call's arguments as content
    openai_stub.responder = lambda r: tool_call("ChatTitle", {"title": "Trip to Rome"})
    model = load_chat_model(openai_model)
    result = await make_title(model, SummaryBoard(summary="Planning a trip to Rome.", topics=["rome"]))
    assert result.value.title == "Trip to Rome" and len(openai_stub.requests) == 1
    assert remembered_mode(model) is None


@pytest.mark.parametrize(
    ("schema", "cap"), [(ExtractionResult, ExtractionResult.max_output_tokens), (ChatTitle, ChatTitle.max_output_tokens)]
)
async def test_every_structured_call_carries_an_output_cap_sized_to_its_schema(openai_stub, openai_model, schema, cap):
    openai_stub.responder = lambda r: structured_answer(r, EMPTY if schema is ExtractionResult else {"title": "T"})
    await invoke_structured(load_chat_model(openai_model), schema, [HumanMessage("json please")])
    (request,) = openai_stub.requests
    # OpenAI's field, and the classic one that llama-cpp-python's server reads (it ignores the other).
    assert request.body["max_completion_tokens"] == cap and request.body["max_tokens"] == cap
    assert cap < 1000


async def test_a_given_output_cap_rides_along_every_fallback_and_the_repair(openai_stub, openai_model):
    openai_stub.like_llama_cpp()
    openai_stub.responder = lambda r: "not json" if not r.is_repair else json.dumps({"title": "T"})
    await invoke_structured(load_chat_model(openai_model), ChatTitle, [HumanMessage("title?")], max_tokens=300)
    assert len(openai_stub.requests) >= 3  # refused json_schema, function_calling, repair
    assert {(r.body.get("max_tokens"), r.body.get("max_completion_tokens")) for r in openai_stub.requests} == {(300, 300)}


async def test_small_model_shapes_are_coerced_without_asking_again(graph, backend, user_id, openai_stub, openai_model, monkeypatch):
    """0.5B in JSON mode: facts as strings, a wrong-case literal, null lists; one call, stored as meant."""
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "json_mode")
    sloppy = {
        "new_facts": ["Lives in Haifa", {"text": "Works as a nurse", "importance": "High"}],
        "new_preferences": None,
        "profile_updates": {"location": "Haifa"},
        "task_updates": None,
    }
    openai_stub.reset(extraction_script(sloppy))
    await stream_turn(graph, "I live in Haifa and work as a nurse.", new_thread(), Context(user_id=user_id, model=openai_model))

    stored = {f.text: f for f in await list_facts(backend.store, user_id)}
    assert set(stored) == {"Lives in Haifa", "Works as a nurse"} and stored["Works as a nurse"].importance == "high"
    (request,) = openai_stub.requests_of("extract")  # no repair call
    assert not request.is_repair


async def test_an_ambiguous_shape_still_goes_to_the_repair(openai_stub, openai_model, monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "json_mode")
    wrong = json.dumps({"title": ["Rome", "Trip"]})  # a list where one string is wanted: no single reading
    openai_stub.responder = lambda r: json.dumps({"title": "Rome trip"}) if r.is_repair else wrong
    result = await invoke_structured(load_chat_model(openai_model), ChatTitle, [HumanMessage("json title")])
    assert result.value.title == "Rome trip" and result.attempts == 2
    assert openai_stub.requests[-1].messages[-2]["content"] == wrong


@pytest.mark.slow
async def test_an_http_error_that_names_no_response_format_is_not_a_refusal(openai_stub, openai_model):
    openai_stub.responder = lambda r: StubReply(error_status=500, error_message="upstream overloaded")
    model = load_chat_model(openai_model)
    with pytest.raises(Exception, match="upstream overloaded"):
        await invoke_structured(model, ChatTitle, [HumanMessage("title?")])
    assert remembered_mode(model) is None
    assert {mode_of(r) for r in openai_stub.requests} == {"json_schema"}


async def test_the_extraction_prompt_reaches_a_refusing_server_in_the_fallback_mode(openai_stub, openai_model):
    """The json_object fallback states the schema in the leading system message (local templates reject later ones)."""
    openai_stub.like_llama_cpp(takes_schema=False)
    openai_stub.honours_tool_choice = False
    openai_stub.responder = lambda r: "I cannot call tools." if mode_of(r) == "function_calling" else json.dumps(EMPTY)
    from memory.extractor import build_extraction_messages

    result = await invoke_structured(
        load_chat_model(openai_model), ExtractionResult, build_extraction_messages("Hi!", "Hello.", {})
    )
    assert result.value.is_empty() and result.method == "json_mode"
    last = openai_stub.requests[-1]
    assert [m["role"] for m in last.messages] == ["system", "user"]
    assert "validates against this JSON schema" in last.messages[0]["content"]
    assert prompts.USER_MESSAGE_TAG in last.text_of("user")


async def test_a_board_cut_at_the_cap_by_a_looping_model_is_kept_up_to_its_last_complete_item(openai_stub, openai_model, monkeypatch):
    # The 0.5B model folding two turns repeated list items until the 1,200-token cap, and did so again when asked
    # to repair: the fold failed every time. What it wrote before the cut is a valid board.
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "function_calling")
    cut = '{"summary": "Planning a trip to Rome with Noa.", "entities": ["Rome", "Noa", "Rome", "Noa", "Ro'
    openai_stub.responder = lambda r: StubReply(tool_calls=[StubToolCall("SummaryBoard", cut)], finish_reason="length")
    model = load_chat_model(openai_model)
    result = await invoke_structured(model, SummaryBoard, [SystemMessage("Fold."), HumanMessage("We go to Rome.")])
    assert result.value.summary == "Planning a trip to Rome with Noa." and result.value.entities == ["Rome", "Noa"]
    assert len(openai_stub.requests) == 1  # no repair call


async def test_a_reply_cut_mid_way_that_is_not_a_complete_object_still_goes_to_the_repair(openai_stub, openai_model, monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "function_calling")
    answers = iter([
        StubReply(tool_calls=[StubToolCall("ChatTitle", '{"title": "Trip to Ro')], finish_reason="length"),
        StubReply(content='{"title": "Trip to Rome"}'),
    ])
    openai_stub.responder = lambda r: next(answers)
    model = load_chat_model(openai_model)
    result = await invoke_structured(model, ChatTitle, [SystemMessage("Title."), HumanMessage("We go to Rome.")])
    assert result.value.title == "Trip to Rome" and result.attempts == 2
    # The repair shows the model what it wrote (the cut arguments), not an empty reply.
    assert any('{"title": "Trip to Ro' in str(m["content"]) for m in openai_stub.requests[-1].messages)
