"""The real client path: langchain-openai over HTTP to a local OpenAI-compatible server, the real graph, real Postgres.

Only the model's answers are scripted (tests/support/openai_stub_server.py); the
request payloads, SSE streaming, response_format / tool-call plumbing and the openai
SDK's parsing are the real ones, so these tests catch what a scripted in-process
model cannot (e.g. the SDK raising on malformed json_schema replies).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import prompts
from prompts.reply_prompt import user_words
from graph.assembly import compile_graph
from core.context import Context
from core.messages import current_turn, sent_at, stamp_sent_at
from llm.chat_model import load_chat_model
from memory.writer.extraction import apply_extraction
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard
from core.text_validation import unstorable_reason
from memory.summarizer import make_title
from memory.user_memory import get_user_document, list_facts, search_facts
from tests.support.graph_turns import metric, new_thread, stream_turn
from tests.support.openai_stub_server import (  # noqa: F401 (pytest fixtures)
    StubReply,
    StubRequest,
    StubToolCall,
    openai_stub,
    openai_stub_server,
    stream_pieces,
    structured_answer,
    tool_call,
)

EMPTY = {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []}
FAILURES = "memory_agent_extraction_failures_total"
INVALID = {"kind": "invalid_output"}


def facts(*texts: str, importance: str = "medium", **extra) -> dict:
    return {**EMPTY, "new_facts": [{"text": t, "importance": importance, **extra} for t in texts]}


def stored_fact_id(request: StubRequest, text: str) -> str:
    """The id the extraction request shows for a stored fact (as a real model would read it)."""
    stored = json.loads(request.tagged(prompts.STORED_MEMORIES_TAG))
    return next(f["id"] for f in stored["facts"] if f["text"] == text)


def responder(
    *,
    reply: str | Callable[[StubRequest], object] = "Noted.",
    extract: Callable[[StubRequest], object] | dict | None = None,
) -> Callable[[StubRequest], object]:
    """A script for the four kinds of call in a turn; ``extract`` may look at the user message."""

    def answer(request: StubRequest):
        if request.kind == "extract":
            value = extract(request) if callable(extract) else (extract or EMPTY)
            return value if isinstance(value, StubReply) else structured_answer(request, value)
        if request.kind == "fold":
            return structured_answer(request, {"summary": "The user talked about themselves.", "topics": ["introductions"]})
        if request.kind == "title":
            return structured_answer(request, {"title": "About the user"})
        return reply(request) if callable(reply) else reply

    return answer


@pytest.fixture
def openai_model(openai_stub) -> str:
    """A model name of its own per test (load_chat_model caches per name)."""
    return f"openai:stub-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


def reply_system_prompt(stub) -> str:
    """The last reply prompt's system message and its current message (what was found for it)."""
    messages = stub.requests_of("reply")[-1].messages
    return f'{messages[0]["content"]}\n{messages[-1]["content"]}'


async def test_reply_streams_token_by_token_over_sse_with_usage(graph, backend, user_id, openai_stub, openai_model):
    text = "Haifa is a port city on the slopes of Mount Carmel, in northern Israel."
    openai_stub.reset(responder(reply=text))
    turn = await stream_turn(graph, "Tell me about Haifa.", new_thread(), Context(user_id=user_id, model=openai_model))

    assert turn.tokens == stream_pieces(text)  # one chunk per streamed word, in order
    assert len(turn.tokens) > 10
    assert turn.final_reply.content == text
    assert turn.other_tokens == []  # the extraction call's JSON never reaches the reply stream

    (reply_request,) = openai_stub.requests_of("reply")
    assert reply_request.stream and reply_request.body["stream_options"] == {"include_usage": True}
    assert {"recall_context", "search_conversation_history", "add_task"} <= set(reply_request.tool_names)
    assert reply_request.messages[0]["role"] == "system" and "## Conversation summary" in reply_request.messages[0]["content"]
    assert "## User context" in reply_request.messages[-1]["content"]
    assert reply_request.messages[-1]["role"] == "user" and user_words(reply_request.messages[-1]["content"]) == "Tell me about Haifa."

    # Usage from the final SSE usage chunk lands in the turn's figures.
    usage = turn.values["turn_usage"]
    assert usage["output_tokens"] == max(1, len(text) // 4)
    assert usage["input_tokens"] > 0 and usage["model_calls"] == 1


@pytest.mark.slow
async def test_the_model_is_told_when_the_message_was_sent_and_when_the_conversation_above_was(graph, backend, user_id, openai_stub, openai_model):
    openai_stub.reset(responder())
    thread, ctx = new_thread(), Context(user_id=user_id, model=openai_model)
    yesterday = datetime.now(timezone.utc) - timedelta(days=1)
    await stream_turn(graph, {"messages": [stamp_sent_at(HumanMessage("I adopted another dog", id=str(uuid.uuid4())), yesterday)]}, thread, ctx)
    await stream_turn(graph, "When did I adopt it?", thread, ctx)  # now; the reply above was dated when it was written (today)
    current = openai_stub.requests_of("reply")[-1].messages[-1]["content"]
    now = sent_at(current_turn((await graph.aget_state(thread)).values["messages"])[0])
    said = f"{now:%A}, {now.day} {now:%B %Y}, {now:%H:%M} UTC. The conversation above runs from {yesterday.day} {yesterday:%B %Y} to today."
    assert f"## Now\n{said}" in current


async def test_extraction_uses_json_schema_response_format_and_stores_facts(graph, backend, user_id, openai_stub, openai_model):
    said = "I live in Haifa and I work as a nurse."
    openai_stub.reset(
        responder(
            extract=lambda r: {**facts("Lives in Haifa", "Works as a nurse", importance="high"), "profile_updates": {"location": "Haifa"}}
            if r.tagged(prompts.USER_MESSAGE_TAG) == said
            else EMPTY
        )
    )
    ctx = Context(user_id=user_id, model=openai_model)
    config = new_thread()
    turn = await stream_turn(graph, said, config, ctx)

    (extract_request,) = openai_stub.requests_of("extract")
    fmt = extract_request.response_format
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "ExtractionResult"
    assert set(fmt["json_schema"]["schema"]["properties"]) == {"new_facts", "new_preferences", "profile_updates", "task_updates"}
    assert not extract_request.stream  # hidden memory calls are not streamed, even under stream_mode="messages"
    assert extract_request.tagged(prompts.ASSISTANT_REPLY_TAG) == "Noted."

    stored = await list_facts(backend.store, user_id)
    assert sorted(f.text for f in stored) == ["Lives in Haifa", "Works as a nurse"]
    assert all(f.importance == "high" and f.source_thread == config["configurable"]["thread_id"] for f in stored)
    assert (await get_user_document(backend.store, user_id)).profile.location == "Haifa"
    assert turn.events_of("memory")[0]["facts_added"] == ["Lives in Haifa", "Works as a nurse"]

    # The next turn's prompt carries them.
    await stream_turn(graph, "Where do I live?", config, ctx)
    assert "- Lives in Haifa" in reply_system_prompt(openai_stub)


@pytest.mark.slow
async def test_same_fact_stated_three_times_is_stored_once(graph, backend, user_id, openai_stub, openai_model):
    # The model repeats the fact each time (as a careless model does); the writer must not duplicate it.
    variants = iter(["Has a dog named Rex", "has a dog named Rex.", "Has a dog  named Rex!"])
    openai_stub.reset(responder(extract=lambda r: facts(next(variants))))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    for _ in range(3):
        await stream_turn(graph, "I have a dog named Rex.", config, ctx)

    (fact,) = await list_facts(backend.store, user_id, include_superseded=True)
    assert fact.text == "Has a dog named Rex" and fact.mentions == 3
    # From the second turn on the model was shown the stored fact (with its id) to avoid repeating it.
    shown = json.loads(openai_stub.requests_of("extract")[1].tagged(prompts.STORED_MEMORIES_TAG))
    assert [f["id"] for f in shown["facts"]] == [fact.id]


@pytest.mark.slow
async def test_contradiction_supersedes_the_old_fact_and_hides_it_from_the_prompt(graph, backend, user_id, openai_stub, openai_model):
    def extract(request: StubRequest):
        said = request.tagged(prompts.USER_MESSAGE_TAG)
        if said == "I live in Haifa.":
            return facts("Lives in Haifa", importance="high")
        if said == "I moved to Rome last month.":
            return facts("Lives in Rome", importance="high", supersedes=stored_fact_id(request, "Lives in Haifa"))
        return EMPTY

    openai_stub.reset(responder(extract=extract))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    await stream_turn(graph, "I live in Haifa.", config, ctx)
    turn = await stream_turn(graph, "I moved to Rome last month.", config, ctx)

    every = {f.text: f for f in await list_facts(backend.store, user_id, include_superseded=True)}
    old, new = every["Lives in Haifa"], every["Lives in Rome"]
    assert (old.status, old.superseded_by) == ("superseded", new.id)
    assert old.valid_to is not None and new.status == "active" and new.valid_to is None
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Lives in Rome"]
    assert turn.events_of("memory")[0]["facts_superseded"] == [{"old": "Lives in Haifa", "new": "Lives in Rome"}]

    await stream_turn(graph, "Which city should I explore this weekend?", config, ctx)
    system = reply_system_prompt(openai_stub)
    assert "- Lives in Rome" in system and "Haifa" not in system.split("## User context", 1)[1]


@pytest.mark.slow
async def test_contradiction_without_an_id_is_caught_by_the_single_value_slot(graph, backend, user_id, openai_stub, openai_model):
    """The model forgot `supersedes`; "Is 31 years old" still replaces "Is 30 years old" (they embed alike)."""
    ages = iter(["Is 30 years old", "Is 31 years old"])
    openai_stub.reset(responder(extract=lambda r: facts(next(ages), importance="high")))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    await stream_turn(graph, "I'm 30.", config, ctx)
    await stream_turn(graph, "Today is my birthday, I turned 31!", config, ctx)

    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Is 31 years old"]
    old = next(f for f in await list_facts(backend.store, user_id, include_superseded=True) if f.status == "superseded")
    assert old.text == "Is 30 years old" and old.valid_to is not None


TRUNCATED = '{"new_facts": [{"text": "Lives in Haifa", "importance": "hi'


async def extraction_malformed_twice(graph, openai_stub, openai_model, user_id: str, said: str):
    """A turn whose extraction call answers cut JSON, first try and repair; the turn and the failure count before it."""
    openai_stub.reset(responder(reply="Nice to meet you.", extract=lambda r: StubReply(content=TRUNCATED)))
    before = metric(FAILURES, INVALID)
    return await stream_turn(graph, said, new_thread(), Context(user_id=user_id, model=openai_model)), before


async def test_malformed_json_twice_where_the_rules_find_nothing_writes_nothing_counts_a_failure_and_the_turn_still_answers(
    graph, backend, user_id, openai_stub, openai_model
):
    turn, before = await extraction_malformed_twice(graph, openai_stub, openai_model, user_id, "Haifa is lovely in spring.")

    assert turn.final_reply.content == "Nice to meet you." and turn.streamed_reply == "Nice to meet you."
    assert metric(FAILURES, INVALID) == before + 1
    assert "invalid twice" in turn.values["memory_written"]["error"]
    assert "invalid twice" in turn.events_of("memory")[0]["error"]
    assert await list_facts(backend.store, user_id, include_superseded=True) == []
    assert (await get_user_document(backend.store, user_id)).profile.location is None

    first, repair = openai_stub.requests_of("extract")
    assert first.response_format["type"] == "json_schema" and not first.is_repair
    # The repair shows the model its own broken reply and the error, asks for JSON only (plain text call).
    assert repair.is_repair and repair.response_format is None
    assert repair.messages[-2] == {"role": "assistant", "content": TRUNCATED}
    assert "Invalid JSON" in repair.messages[-1]["content"] and "JSON schema" in repair.messages[-1]["content"]


async def test_malformed_json_twice_keeps_what_the_rules_found_and_says_the_model_failed(
    graph, backend, user_id, openai_stub, openai_model
):
    turn, before = await extraction_malformed_twice(graph, openai_stub, openai_model, user_id, "My name is Dana and I live in Haifa.")

    assert turn.final_reply.content == "Nice to meet you."
    assert metric(FAILURES, INVALID) == before + 1
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Lives in Haifa"]
    profile = (await get_user_document(backend.store, user_id)).profile
    assert (profile.name, profile.location) == ("Dana", "Haifa")
    assert "invalid twice" in turn.values["memory_written"]["model_error"]
    assert "error" not in turn.values["memory_written"]


async def test_a_reply_with_one_unknown_field_twice_keeps_its_valid_facts_not_nothing(graph, backend, user_id, openai_stub, openai_model):
    """A weak model that adds a field the schema does not have ("instrument" in the profile), in its
    reply and in its repair, lost every fact it had found: the whole reply was invalid twice. What of
    it is valid is kept now, the unknown field dropped."""
    extra = '{"new_facts": [{"text": "Plays the cello"}], "profile_updates": {"instrument": "cello"}}'
    openai_stub.reset(responder(reply="Lovely.", extract=lambda r: StubReply(content=extra)))
    turn = await stream_turn(graph, "I have been playing the cello for two years.", new_thread(), Context(user_id=user_id, model=openai_model))

    assert turn.final_reply.content == "Lovely."
    assert "Plays the cello" in [f.text for f in await list_facts(backend.store, user_id)]
    assert "error" not in turn.values["memory_written"]
    assert len(openai_stub.requests_of("extract")) == 2  # the reply and its repair, both with the field


async def test_malformed_reply_fixed_by_the_repair_is_written(graph, backend, user_id, openai_stub, openai_model):
    prose = 'Sure! Here is the JSON: {"new_facts": [{"text": "Has a cat named Luna"}]}'

    def extract(request: StubRequest):
        if request.is_repair:
            return StubReply(content=json.dumps(facts("Has a cat named Luna")))
        return StubReply(content=prose)

    openai_stub.reset(responder(extract=extract))
    before = metric(FAILURES, INVALID)
    turn = await stream_turn(graph, "My cat is called Luna.", new_thread(), Context(user_id=user_id, model=openai_model))

    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Has a cat named Luna"]
    assert metric(FAILURES, INVALID) == before
    assert turn.values["memory_written"]["facts_added"] == ["Has a cat named Luna"]
    _, repair = openai_stub.requests_of("extract")
    assert repair.messages[-2]["content"] == prose


async def test_text_mode_sends_no_response_format_and_parses_strictly(graph, backend, user_id, openai_stub, openai_model, monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", "text")
    valid = json.dumps(facts("Speaks Hebrew and Italian"))

    def extract(request: StubRequest):
        # First a JSON object followed by chatter (rejected: strict), then a fenced object (accepted).
        return StubReply(content=f"```json\n{valid}\n```" if request.is_repair else f"{valid}\nHope this helps!")

    openai_stub.reset(responder(extract=extract))
    await stream_turn(graph, "I speak Hebrew and Italian.", new_thread(), Context(user_id=user_id, model=openai_model))

    first, repair = openai_stub.requests_of("extract")
    assert first.response_format is None and not first.tools
    # The schema rides in the leading system message (local chat templates reject a later one).
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert "validates against this JSON schema" in first.messages[0]["content"]
    assert "Extra data" in repair.messages[-1]["content"]  # json.loads refused the trailing text
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Speaks Hebrew and Italian"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
async def test_each_structured_output_method_round_trips(graph, backend, user_id, openai_stub, openai_model, monkeypatch, method):
    monkeypatch.setenv("MEMORY_AGENT_STRUCTURED_OUTPUT", method)
    openai_stub.reset(responder(extract=lambda r: facts("Works as a nurse")))
    await stream_turn(graph, "I work as a nurse.", new_thread(), Context(user_id=user_id, model=openai_model))
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Works as a nurse"]

    (request,) = openai_stub.requests_of("extract")
    if method == "function_calling":
        assert request.body["tool_choice"]["function"]["name"] == "ExtractionResult" and request.tool_names == ["ExtractionResult"]
    elif method == "json_mode":
        assert request.response_format == {"type": "json_object"}
        assert "validates against this JSON schema" in request.messages[0]["content"]  # the schema is stated
    else:
        assert request.response_format["type"] == "json_schema"

    # The title prompt does not say "JSON" itself; json_mode must still satisfy the API's rule.
    titled = await make_title(load_chat_model(openai_model), SummaryBoard(summary="Nursing shifts in Haifa.", topics=["work"]))
    assert titled.value == ChatTitle(title="About the user")


@pytest.mark.parametrize(
    ("tool", "args", "expected_in_result"),
    [
        ("recall_context", {"context_type": "facts"}, "- Is allergic to peanuts"),
        ("search_conversation_history", {"query": "bakery sourdough"}, "The bakery on Herzl street sells sourdough"),
    ],
)
@pytest.mark.slow
async def test_tool_call_round_trips_through_the_client(graph, backend, user_id, openai_stub, openai_model, tool, args, expected_in_result):
    await apply_extraction(backend.store, user_id, ExtractionResult.model_validate(facts("Is allergic to peanuts")))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    openai_stub.reset(responder(reply="Good to know."))
    await stream_turn(graph, "The bakery on Herzl street sells sourdough.", config, ctx)

    def reply(request: StubRequest):
        tool_results = [m for m in request.messages if m["role"] == "tool"]
        if not tool_results:
            return tool_call(tool, args, id="call_lookup_1")
        return f"From my notes: {tool_results[-1]['content'][:60]}"

    openai_stub.reset(responder(reply=reply))
    turn = await stream_turn(graph, "What do you remember?", config, ctx)

    first, second = openai_stub.requests_of("reply")
    assert first.stream and second.stream  # the tool call itself arrived as streamed deltas
    call_message = second.messages[-2]
    assert call_message["role"] == "assistant"
    assert call_message["tool_calls"][0]["id"] == "call_lookup_1"
    assert json.loads(call_message["tool_calls"][0]["function"]["arguments"]) == args
    result = second.messages[-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_lookup_1"
    assert expected_in_result in result["content"]

    new = turn.values["messages"][-4:]
    assert [type(m) for m in new] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert new[1].tool_calls[0]["args"] == args and new[2].tool_call_id == "call_lookup_1"
    assert turn.final_reply.content.startswith("From my notes: ")
    assert turn.streamed_reply == turn.final_reply.content  # only the final answer's text streamed
    assert turn.values["turn_usage"]["model_calls"] == 2


def answer_after_the_tool(call: StubReply):
    """A reply script: ``call`` first, then an answer that quotes the tool's result."""

    def reply(request: StubRequest):
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        return f"Looked it up: {results[-1][:40]}" if results else call

    return reply


@pytest.mark.parametrize(
    "call",
    [
        tool_call("search_conversation_history", '{"query": "Haifa \\ud800"}'),  # a broken escape in an argument
        tool_call("recall_context", '{"context_type": "\\ud800"}'),  # in an argument the tool refuses
        tool_call("recall\ud800", {"context_type": "facts"}),  # in the name of no tool
        tool_call("recall_context", {"context_type": "facts"}, id="call_\udc00"),  # in the call's id
    ],
    ids=["argument", "refused-argument", "name", "id"],
)
async def test_a_tool_call_carrying_a_lone_surrogate_is_answered_and_the_turn_is_kept(graph, backend, user_id, openai_stub, openai_model, call):
    """A small model's broken unicode escape in a tool call made the next request unsendable (the
    openai SDK cannot encode it): the whole turn failed and the user's message was discarded."""
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    openai_stub.reset(responder(reply=answer_after_the_tool(call)))
    turn = await stream_turn(graph, "Where do I live?", config, ctx)

    assert turn.final_reply.content.startswith("Looked it up: ")
    human, called, result, answer = turn.values["messages"]
    assert (human.content, answer.content) == ("Where do I live?", turn.final_reply.content)
    assert unstorable_reason(json.dumps(called.tool_calls, ensure_ascii=False)) is None  # replaced, as a reply's text is
    assert result.tool_call_id == called.tool_calls[0]["id"]
    _, second = openai_stub.requests_of("reply")  # the call and its result went back to the model as they are kept
    assert second.messages[-1]["tool_call_id"] == second.messages[-2]["tool_calls"][0]["id"] == result.tool_call_id

    openai_stub.reset(responder(reply="Still here."))
    assert (await stream_turn(graph, "Thanks!", config, ctx)).final_reply.content == "Still here."


async def test_a_tool_call_the_server_sent_without_an_id_gets_one_and_is_answered(graph, backend, user_id, openai_stub, openai_model):
    """Some OpenAI-compatible servers leave a streamed call's id out: its result could not be made
    (a ToolMessage needs the id), and the turn failed with a pydantic error, its message discarded."""
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    no_id = StubReply(tool_calls=[StubToolCall("recall_context", {"context_type": "facts"}, id=None)])
    openai_stub.reset(responder(reply=answer_after_the_tool(no_id)))
    turn = await stream_turn(graph, "What do you know about me?", config, ctx)

    assert turn.final_reply.content == "Looked it up: No facts stored."
    _, called, result, _ = turn.values["messages"]
    assert called.tool_calls[0]["id"] and result.tool_call_id == called.tool_calls[0]["id"]
    _, second = openai_stub.requests_of("reply")
    assert second.messages[-1]["tool_call_id"] == second.messages[-2]["tool_calls"][0]["id"] == result.tool_call_id


@pytest.mark.slow
async def test_near_duplicate_merge_keeps_the_richer_text_and_raises_importance(graph, backend, user_id, openai_stub, openai_model):
    said = iter([facts("Is allergic to peanuts", importance="medium"), facts("Is severely allergic to peanuts", importance="medium")])
    openai_stub.reset(responder(extract=lambda r: next(said)))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    await stream_turn(graph, "I'm allergic to peanuts.", config, ctx)
    turn = await stream_turn(graph, "Really allergic: even traces of peanuts are dangerous for me.", config, ctx)

    (fact,) = await list_facts(backend.store, user_id, include_superseded=True)
    assert fact.text == "Is severely allergic to peanuts"
    assert fact.importance == "high" and fact.mentions == 2
    assert turn.values["memory_written"]["facts_merged"] == ["Is severely allergic to peanuts"]
    # The merged text was re-embedded: a search for the new wording finds it best.
    [(hit, score)] = await search_facts(backend.store, user_id, "Is severely allergic to peanuts", limit=1)
    assert hit.id == fact.id and score > 0.99


@pytest.mark.slow
@pytest.mark.parametrize(
    "before, after",
    [
        ("Is not allergic to peanuts", "Is allergic to peanuts"),
        ("Is allergic to peanuts", "Is not allergic to peanuts"),
        ("Likes green tea", "Dislikes green tea"),
    ],
)
async def test_a_fact_said_the_other_way_round_supersedes_the_old_one(graph, backend, user_id, openai_stub, openai_model, before, after):
    """The model gave no `supersedes`; the negation embeds like the fact (cosine 0.96) but is no near duplicate to merge into."""
    said = iter([facts(before, importance="high"), facts(after, importance="high")])
    openai_stub.reset(responder(extract=lambda r: next(said)))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    await stream_turn(graph, f"About me: {before.lower()}.", config, ctx)
    turn = await stream_turn(graph, f"Correction, it is the other way round: {after.lower()}.", config, ctx)

    assert [f.text for f in await list_facts(backend.store, user_id)] == [after]
    assert turn.values["memory_written"]["facts_superseded"] == [{"old": before, "new": after}]


@pytest.mark.slow
async def test_a_fact_said_again_a_week_later_keeps_both_dates_rather_than_merging_into_the_first(graph, backend, user_id, openai_stub, openai_model):
    """"Has an exam next Tuesday (2026-12-01)" and "(2026-12-08)" embed at 0.996: a merge kept the first date only."""
    openai_stub.reset(responder(extract=facts("Has an exam next Tuesday", importance="high")))
    ctx, config = Context(user_id=user_id, model=openai_model), new_thread()
    monday = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
    for when in (monday, monday + timedelta(days=7)):
        said = stamp_sent_at(HumanMessage("I have an exam next Tuesday.", id=str(uuid.uuid4())), when)
        turn = await stream_turn(graph, {"messages": [said]}, config, ctx)

    assert sorted(f.text for f in await list_facts(backend.store, user_id)) == [
        "Has an exam next Tuesday (2026-12-01)",
        "Has an exam next Tuesday (2026-12-08)",
    ]
    assert turn.values["memory_written"]["facts_added"] == ["Has an exam next Tuesday (2026-12-08)"]


@pytest.mark.slow
async def test_http_error_on_the_memory_call_still_completes_the_turn(graph, backend, user_id, openai_stub, openai_model):
    """The provider fails the extraction call (HTTP 500): the answer stands, nothing is half-written, the run ends cleanly."""
    openai_stub.reset(
        responder(reply="Here is my answer.", extract=lambda r: StubReply(error_status=500, error_message="upstream overloaded"))
    )
    config = new_thread()
    turn = await stream_turn(graph, "Haifa is lovely in spring.", config, Context(user_id=user_id, model=openai_model))

    assert turn.final_reply.content == "Here is my answer."
    assert "upstream overloaded" in turn.values["memory_written"]["error"]
    assert turn.events_of("memory")[0]["error"] == turn.values["memory_written"]["error"]
    assert await list_facts(backend.store, user_id) == []
    assert not (await graph.aget_state(config)).next  # the run finished; nothing pending


@pytest.mark.slow
async def test_tool_budget_ends_the_loop_and_no_call_is_left_unanswered(graph, backend, user_id, openai_stub, openai_model):
    """A model that keeps calling tools: after max_tool_steps it is asked without tools, and stray calls are dropped."""
    openai_stub.reset(responder(reply=lambda r: tool_call("recall_context", {"context_type": "facts"})))
    turn = await stream_turn(graph, "Look everything up.", new_thread(), Context(user_id=user_id, model=openai_model, max_tool_steps=2))

    requests = openai_stub.requests_of("reply")
    assert [bool(r.tools) for r in requests] == [True, True, False]  # the last call offers no tools
    final = turn.final_reply
    assert final is not None and final.content == "I could not finish looking that up within the tool budget."
    messages = turn.values["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert turn.values["tool_steps"] == 2


PROXY_PAGE = "<html><head><title>502</title></head><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>"


async def test_a_reply_answered_with_a_proxy_page_fails_naming_the_page_and_the_server_address(
    graph, backend, user_id, openai_stub, openai_model
):
    """A 200 with an HTML page (a wrong OPENAI_BASE_URL, a proxy) was "No generation chunks were returned"."""
    from llm.compatible_openai import NotAChatCompletion

    openai_stub.reset(lambda request: StubReply(body=PROXY_PAGE))
    with pytest.raises(NotAChatCompletion) as failure:
        await stream_turn(graph, "Hello there", new_thread(), Context(user_id=user_id, model=openai_model))
    assert openai_stub.base_url.rstrip("/") in str(failure.value)
    assert "not a chat completion" in str(failure.value) and "OPENAI_BASE_URL" in str(failure.value)


@pytest.mark.parametrize("streaming", [False, True], ids=["one answer", "streamed"])
async def test_a_proxy_page_answered_to_a_plain_call_names_what_it_was(openai_stub, openai_model, streaming):
    from llm.compatible_openai import NotAChatCompletion

    openai_stub.reset(lambda request: StubReply(body=PROXY_PAGE))
    model = load_chat_model(openai_model)
    with pytest.raises(NotAChatCompletion, match="502 Bad Gateway nginx" if not streaming else "no stream events"):
        if streaming:
            async for _ in model.astream("hi"):
                pass
        else:
            await model.ainvoke("hi")


async def test_a_memory_call_answered_with_a_proxy_page_says_so_and_the_reply_stands(graph, backend, user_id, openai_stub, openai_model):
    """Structured output over a page was "'str' object has no attribute 'choices'" in memory_written's error."""
    openai_stub.reset(responder(reply="Here is my answer.", extract=lambda r: StubReply(body=PROXY_PAGE)))
    turn = await stream_turn(graph, "Haifa is lovely in spring.", new_thread(), Context(user_id=user_id, model=openai_model))

    assert turn.final_reply.content == "Here is my answer."
    error = turn.values["memory_written"]["error"]
    assert "text/html page: '502 502 Bad Gateway nginx'" in error and "not a chat completion" in error
    assert await list_facts(backend.store, user_id) == []
