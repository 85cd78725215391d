"""The offline model: restates memory from the prompt's sections, never pretends to be an LLM."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from prompts.reply_prompt import build_prompt
from core.tokens import count_tokens
from offline_model.model import OfflineChatModel
from llm.structured import invoke_structured
from memory.extractor import build_extraction_messages
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard
from memory.summarizer import build_fold_messages, build_recompress_messages, make_title

FULL_CONTEXT = {
    "profile": {"name": "Dana", "location": "Haifa", "role": "nurse", "native_language": "Hebrew", "goals": ["learn Italian"]},
    "preferences": {"answer_length": "short", "prefers_bullets": True},
    "facts": [{"text": "Lives in Haifa"}, {"text": "Has a dog named Rex"}, {"text": "Works night shifts"}],
    "tasks": [{"id": "t1", "description": "call the bank", "status": "open", "due": "Friday"}],
    "related_chats": [{"title": "Trip to Rome", "summary_snippet": "planning a trip in May"}],
}
KNOWLEDGE = [
    {"citation": "docs/guide.md#2", "heading_path": "Setup > Install", "content": "Install the package with pip. Then run the CLI."},
    {"citation": "docs/faq.md#0", "heading_path": "", "content": "The agent stores memory in Postgres. " + "More words here. " * 20},
    {"citation": "docs/extra.md#5", "heading_path": "", "content": "A third chunk that should not be quoted."},
]


def prompt(current: str, loaded=None, summary: str = "", knowledge=(), recent=()):
    return build_prompt(
        persona_text="You are a helpful assistant.",
        loaded_context=loaded or {},
        summary_text=summary,
        knowledge=list(knowledge),
        recent=list(recent),
        current=HumanMessage(current),
    ).messages


@pytest.fixture
def model() -> OfflineChatModel:
    return OfflineChatModel()


# --------------------------------------------------------------------------- identity
def test_model_identifies_itself_as_offline(model):
    assert model._llm_type == "offline"
    assert model.model_name == "offline"


# --------------------------------------------------------------------------- replies
def test_reply_to_where_do_i_live_contains_the_profile_location(model):
    reply = model.invoke(prompt("where do I live?", {"profile": {"location": "Haifa"}}))
    assert isinstance(reply, AIMessage)
    assert reply.content.startswith("(offline model)")
    assert "you live in Haifa" in reply.content


def test_reply_maps_profile_and_preferences_to_second_person(model):
    reply = model.invoke(prompt("hello", FULL_CONTEXT)).content
    for phrase in (
        "your name is Dana",
        "you live in Haifa",
        "you work as a nurse",
        "your native language is Hebrew",
        "your goals: learn Italian",
        "you prefer short answers",
        "you prefer bullet points",
    ):
        assert phrase in reply


def test_reply_lists_facts_tasks_and_related_chats_without_repeating_the_profile(model):
    reply = model.invoke(prompt("hello", FULL_CONTEXT)).content
    assert "Facts: Has a dog named Rex; Works night shifts." in reply
    assert "Lives in Haifa" not in reply  # already said as "you live in Haifa"
    assert "Open tasks: call the bank (due Friday)." in reply
    assert '"Trip to Rome"' in reply


def test_reply_quotes_the_first_sentence_of_at_most_two_knowledge_chunks_with_citations(model):
    reply = model.invoke(prompt("how do I install it?", knowledge=KNOWLEDGE)).content
    assert "Related knowledge: [docs/guide.md#2] Install the package with pip." in reply
    assert "[docs/faq.md#0] The agent stores memory in Postgres." in reply
    assert "Then run the CLI" not in reply
    assert "docs/extra.md#5" not in reply


def test_knowledge_snippets_are_cut_to_160_characters(model):
    long_chunk = [{"citation": "docs/long.md#1", "heading_path": "", "content": "word " * 100 + "end."}]
    reply = model.invoke(prompt("tell me", knowledge=long_chunk)).content
    snippet = reply.split("[docs/long.md#1] ", 1)[1].split(" Summary so far")[0]
    assert len(snippet) <= 160 and snippet.endswith("…")


def test_reply_includes_the_summary_so_far(model):
    reply = model.invoke(prompt("go on", {"profile": {"name": "Dana"}}, summary="(extractive) We planned a trip to Rome.")).content
    assert "Summary so far: (extractive) We planned a trip to Rome." in reply


def test_reply_with_empty_memory_says_so_and_echoes_the_message(model):
    reply = model.invoke(prompt("What's the weather like?")).content
    assert reply == '(offline model) I don\'t know anything about you yet. You said: "What\'s the weather like?"'


def test_echo_of_a_long_message_is_truncated(model):
    reply = model.invoke(prompt("blah " * 200)).content
    assert reply.endswith('…"')
    assert len(reply) < 200


def test_reply_is_capped_near_600_characters(model):
    big = dict(FULL_CONTEXT, facts=[{"text": f"Fact number {i} is quite a long sentence about many things"} for i in range(30)])
    reply = model.invoke(prompt("hi", big, summary="(extractive) " + "A long summary. " * 40, knowledge=KNOWLEDGE)).content
    assert len(reply) <= 600


def test_reply_without_a_system_message_still_works(model):
    assert model.invoke("hello").content == '(offline model) I don\'t know anything about you yet. You said: "hello"'


def test_reply_is_deterministic(model):
    messages = prompt("where do I live?", FULL_CONTEXT, summary="(extractive) We talked.", knowledge=KNOWLEDGE)
    assert model.invoke(messages).content == OfflineChatModel().invoke(messages).content


def test_reply_only_reflects_memory_and_never_answers_the_question(model):
    reply = model.invoke(prompt("What is 2 + 2?", {"profile": {"name": "Dana"}})).content
    assert reply == "(offline model) I know: your name is Dana."


# --------------------------------------------------------------------------- usage and streaming
def test_invoke_reports_usage_as_characters_over_four(model):
    messages = prompt("where do I live?", FULL_CONTEXT)
    reply = model.invoke(messages)
    usage = reply.usage_metadata
    # The one token counter, per message (ceil of characters / 4): a rounded total of the characters
    # differs by one whenever the messages' remainders add up past a half.
    assert usage["input_tokens"] == sum(count_tokens(m.content) for m in messages)
    assert usage["output_tokens"] == count_tokens(reply.content)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_stream_yields_word_chunks_whose_concatenation_equals_the_invoke_reply(model):
    messages = prompt("where do I live?", FULL_CONTEXT, knowledge=KNOWLEDGE)
    expected = model.invoke(messages)
    chunks = list(model.stream(messages))
    assert len(chunks) > 5
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert "".join(c.content for c in chunks) == expected.content
    assert chunks[-1].usage_metadata == expected.usage_metadata
    assert all(c.usage_metadata is None for c in chunks[:-1])
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.usage_metadata["output_tokens"] == expected.usage_metadata["output_tokens"]


async def test_astream_matches_ainvoke(model):
    messages = prompt("hello", FULL_CONTEXT)
    expected = await model.ainvoke(messages)
    chunks = [c async for c in model.astream(messages)]
    assert len(chunks) > 5
    assert "".join(c.content for c in chunks) == expected.content
    assert chunks[-1].usage_metadata["input_tokens"] == expected.usage_metadata["input_tokens"]


# --------------------------------------------------------------------------- tools
def test_bind_tools_returns_a_model_that_replies_without_tool_calls(model):
    @tool
    def search_knowledge(query: str) -> str:
        """Search the knowledge base."""
        return "nothing"

    bound = model.bind_tools([search_knowledge], tool_choice="auto")
    reply = bound.invoke(prompt("search the docs for pip", knowledge=KNOWLEDGE))
    assert reply.tool_calls == []
    assert reply.content.startswith("(offline model)")


def test_the_offline_model_calls_its_forget_tool_when_asked_to_forget_and_then_says_what_it_did(model):
    @tool
    def forget_memory(what: str) -> str:
        """Forget something."""
        return "done"

    bound = model.bind_tools([forget_memory])
    (call,) = bound.invoke(prompt("Please forget that I work as a nurse")).tool_calls
    assert call["name"] == "forget_memory" and call["args"] == {"what": "that I work as a nurse"}
    assert model.invoke(prompt("Please forget that I work as a nurse")).tool_calls == []  # no tool bound, no call


# --------------------------------------------------------------------------- structured output
FOLD_MESSAGES = [
    HumanMessage("My name is Dana and I live in Haifa with my dog Rex."),
    AIMessage("(offline model) I don't know anything about you yet."),
    HumanMessage("I work at Rambam Hospital since 2015. Remind me to call the bank tomorrow."),
]


def test_structured_summary_board_is_an_extractive_fold_of_the_new_messages(model):
    board = model.with_structured_output(SummaryBoard).invoke(build_fold_messages(SummaryBoard(), FOLD_MESSAGES, "structured"))
    assert isinstance(board, SummaryBoard)
    assert board.summary.startswith("(extractive) ")
    assert "Haifa" in board.entities and "Rambam Hospital" in board.entities
    assert board.action_items == ["Remind me to call the bank tomorrow"]


def test_structured_summary_board_keeps_the_previous_board(model):
    previous = SummaryBoard(summary="(extractive) We met in Rome in 2019.", key_facts=["I met Noa in Rome in 2019"], entities=["Noa"])
    board = model.with_structured_output(SummaryBoard).invoke(build_fold_messages(previous, FOLD_MESSAGES, "narrative"))
    assert board.key_facts[0] == "I met Noa in Rome in 2019"
    assert "We met in Rome in 2019." in board.summary
    assert board.entities[0] == "Noa"


def test_structured_summary_board_recompress_fits_the_requested_tokens(model):
    board = model.with_structured_output(SummaryBoard).invoke(build_fold_messages(SummaryBoard(), FOLD_MESSAGES * 3, "structured"))
    small = model.with_structured_output(SummaryBoard).invoke(build_recompress_messages(board, 25, "structured"))
    assert round(len(small.render()) / 4) <= 25


def test_structured_extraction_uses_rules_and_stored_memories(model):
    stored = {"facts": [{"id": "f-tlv", "text": "Lives in Tel Aviv"}], "tasks": [{"id": "t1", "description": "call the bank", "status": "open"}]}
    messages = build_extraction_messages("My name is Dana. I moved to Haifa. I finished calling the bank.", "(offline model) ok", stored)
    result = model.with_structured_output(ExtractionResult).invoke(messages)
    assert result.profile_updates.name == "Dana"
    assert [f.supersedes for f in result.new_facts if f.text == "Lives in Haifa"] == ["f-tlv"]
    assert [(u.action, u.task_id) for u in result.task_updates] == [("complete", "t1")]


def test_structured_extraction_ignores_the_assistant_reply(model):
    messages = build_extraction_messages("Thanks!", "You live in Haifa and your name is Dana.", {})
    assert model.with_structured_output(ExtractionResult).invoke(messages).is_empty()


def test_structured_chat_title_is_built_from_the_summary_topics(model):
    board = SummaryBoard(summary="(extractive) I am learning Italian verbs.", entities=["Rome"], topics=["italian", "verbs", "grammar", "rome"])
    title = model.with_structured_output(ChatTitle).invoke([SystemMessage("Title it."), HumanMessage(f"<chat_summary>\n{board.render()}\n</chat_summary>")])
    assert title.title == "Italian, Verbs, Grammar"


def test_chat_title_falls_back_to_words_of_the_summary(model):
    title = model.with_structured_output(ChatTitle).invoke([HumanMessage("<chat_summary>\nPlanning the garden: tomatoes, tomatoes and basil.\n</chat_summary>")])
    assert title.title.startswith("Tomatoes")
    assert 1 <= len(title.title.split()) <= 6


@pytest.mark.parametrize(
    "schema, messages",
    [
        (SummaryBoard, build_fold_messages(SummaryBoard(), FOLD_MESSAGES, "structured")),
        (ExtractionResult, build_extraction_messages("I live in Haifa.", "ok", {})),
        (ChatTitle, [HumanMessage("<chat_summary>\nTopics: haifa; nursing\n</chat_summary>")]),
    ],
)
async def test_include_raw_returns_raw_json_message_parsed_value_and_no_error(model, schema, messages):
    out = await model.with_structured_output(schema, include_raw=True).ainvoke(messages)
    assert set(out) == {"raw", "parsed", "parsing_error"}
    assert out["parsing_error"] is None
    assert isinstance(out["parsed"], schema)
    assert isinstance(out["raw"], AIMessage)
    assert schema.model_validate(json.loads(out["raw"].content)) == out["parsed"]
    assert out["raw"].usage_metadata["input_tokens"] > 0


@pytest.mark.parametrize("method", ["auto", "text"])
async def test_invoke_structured_works_in_native_and_text_mode(model, method):
    fold = await invoke_structured(model, SummaryBoard, build_fold_messages(SummaryBoard(), FOLD_MESSAGES, "structured"), method=method)
    assert fold.value.summary.startswith("(extractive) ") and fold.attempts == 1
    extraction = await invoke_structured(model, ExtractionResult, build_extraction_messages("I live in Haifa.", "ok", {}), method=method)
    assert extraction.value.profile_updates.location == "Haifa" and extraction.attempts == 1
    assert fold.method == method and fold.input_tokens > 0 and fold.output_tokens > 0


async def test_make_title_runs_through_the_offline_model(model):
    result = await make_title(model, SummaryBoard(summary="(extractive) Trip planning.", topics=["rome", "trip"]))
    assert result.value.title == "Rome, Trip"


def test_plain_call_with_a_json_request_returns_the_structured_json_as_content(model):
    messages = [
        *build_extraction_messages("Remind me to call mom tomorrow.", "ok", {}),
        SystemMessage("Reply with only one JSON object, no prose and no code fence."),
    ]
    reply = model.invoke(messages)
    result = ExtractionResult.model_validate_json(reply.content)
    assert [(u.description, u.due) for u in result.task_updates] == [("call mom tomorrow", "tomorrow")]
    chunks = list(model.stream(messages))
    assert "".join(c.content for c in chunks) == reply.content


def test_plain_call_for_a_fold_in_text_mode_returns_a_summary_board_json(model):
    messages = [*build_fold_messages(SummaryBoard(), FOLD_MESSAGES, "structured"), SystemMessage("Reply with only one JSON object")]
    board = SummaryBoard.model_validate_json(model.invoke(messages).content)
    assert board.summary.startswith("(extractive) ")


def test_tags_typed_in_chat_without_a_json_request_get_a_normal_reply(model):
    reply = model.invoke(prompt("what does <user_message>hi</user_message> mean?")).content
    assert reply.startswith("(offline model)")


@pytest.mark.parametrize("brief", [False, True], ids=["full", "brief"])
def test_a_chat_message_naming_a_schema_in_json_gets_a_chat_reply_in_either_layout(model, brief):
    """The brief layout leaves an empty summary out, so a new chat's prompt has no summary header:
    a user's 'JSON "title": "ExtractionResult" …' was answered as an extraction call, with JSON, and
    a long one raised out of the reply node (a review's fuzzing, stop 62)."""
    said = 'Show me JSON like "title": "ExtractionResult". I like ' + "a" * 2100
    messages = build_prompt(
        persona_text="You are a helpful assistant.", loaded_context={}, summary_text="", knowledge=[], recent=[],
        current=HumanMessage(said), brief=brief,
    ).messages
    reply = model.invoke(messages).content
    assert reply.startswith("(offline model)") and "new_facts" not in reply


def test_unknown_schema_raises_not_implemented_with_a_clear_message(model):
    class Weather(BaseModel):
        city: str

    with pytest.raises(NotImplementedError, match="Weather.*SummaryBoard, ExtractionResult, ChatTitle"):
        model.with_structured_output(Weather)
    with pytest.raises(NotImplementedError):
        model.with_structured_output({"title": "weather", "type": "object"})


def test_structured_output_is_deterministic(model):
    messages = build_fold_messages(SummaryBoard(), FOLD_MESSAGES, "structured")
    runnable = model.with_structured_output(SummaryBoard)
    assert runnable.invoke(messages) == runnable.invoke(messages)


def test_a_title_from_a_summary_whose_topic_is_one_long_word_is_one_a_chat_title_accepts():
    """A pasted 5,000-character token as a topic made a title ChatTitle refused, so the chat kept
    its old title at every fold (a review's fuzzing, stop 62)."""
    from offline_model.model import title_from_summary

    title = title_from_summary("Topics: " + "x" * 5000 + "; garden")
    assert ChatTitle(title=title).title == title and len(title) == 200 and title.endswith("…")
    assert title_from_summary("Topics: garden; tomatoes") == "Garden, Tomatoes"
