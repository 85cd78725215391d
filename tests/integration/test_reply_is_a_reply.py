"""A local model's reply is a reply, over the real client path (langchain-openai against the stub
server, streamed word by word as a server does): no template or tool markup reaches the user, and a
reply that only echoes the user or repeats the previous reply is asked again once, then replaced."""

from __future__ import annotations

import io
import uuid

import pytest

from app.cli.chat_session import ChatSession
from llm.reply_checks import NUDGES, no_answer_text
from llm.text_tool_calls import RETRY_TEMPERATURE
from prompts.reply_prompt import user_words
from tests.support.openai_stub_server import StubRequest, openai_stub, openai_stub_server, replies_only  # noqa: F401

DANA = [
    "Hi! My name is Dana, I live in Haifa and I work as a nurse.",
    "I prefer short answers.",
    "Remind me to renew my passport next month.",
    "What do you know about me?",
]
MARKUP = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_response>", "</tool_response>", "<tool_call>", "</tool_call>")


script = replies_only


def nudged(request: StubRequest, kind: str) -> bool:
    return NUDGES[kind] in request.messages[0]["content"]


def first_user_line(request: StubRequest) -> str:
    """What the 0.5B said to every line of Dana's: her first message (the first time after a raw tag)."""
    return user_words(next(m["content"] for m in request.messages if m["role"] == "user"))


@pytest.fixture
def cli(backend, user_id, openai_stub):
    def make() -> tuple[ChatSession, io.StringIO]:
        out = io.StringIO()
        overrides = {"model": f"openai:stub-{uuid.uuid4().hex[:8]}"}
        return ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=io.StringIO(), context_overrides=overrides), out

    return make


@pytest.mark.slow
async def test_template_and_tool_markup_never_reaches_the_user_or_the_stored_reply(cli, openai_stub):
    openai_stub.reset(script(lambda r: "</tool_response>\nHello Dana, nice to meet you.<|im_end|>\n<|im_start|>user\nok"))
    session, out = cli()
    assert await session.send(DANA[0]) == "Hello Dana, nice to meet you."
    assert out.getvalue() == "Hello Dana, nice to meet you.\n"
    stored = (await session.graph.aget_state(session.config)).values["messages"][-1]
    assert stored.text == "Hello Dana, nice to meet you."


async def test_an_echo_is_asked_again_once_with_a_nudge_and_without_tools_and_the_answer_is_shown(cli, openai_stub):
    openai_stub.reset(script(lambda r: "Hello Dana, a nurse in Haifa!" if nudged(r, "echo") else "</tool_response>" + r.last_user_text))
    session, out = cli()
    assert await session.send(DANA[0]) == "Hello Dana, a nurse in Haifa!"
    first, again = openai_stub.requests_of("reply")
    assert first.tools and not again.tools and nudged(again, "echo")
    values = (await session.graph.aget_state(session.config)).values
    assert values["messages"][-1].text == "Hello Dana, a nurse in Haifa!" and values["turn_usage"]["model_calls"] == 2


async def test_a_model_that_only_echoes_gets_a_clear_note_after_one_more_try(cli, openai_stub):
    openai_stub.reset(script(lambda r: r.last_user_text))
    session, out = cli()
    assert await session.send(DANA[0]) == no_answer_text("echo", DANA[0])
    assert len(openai_stub.requests_of("reply")) == 2 and out.getvalue() == no_answer_text("echo", DANA[0]) + "\n"


async def test_the_try_after_an_echo_gets_memorys_sections_as_instructions_and_the_users_words_alone(cli, openai_stub):
    """The real 0.5B copied a message that opened with memory's sections back every time, but answered
    the same words alone with the sections in the system message: the second try is asked that way."""
    openai_stub.reset(script(lambda r: "Hello Dana!" if nudged(r, "echo") else r.last_user_text))
    session, _ = cli()
    assert await session.send(DANA[0]) == "Hello Dana!"
    first, again = openai_stub.requests_of("reply")
    assert first.messages[-1]["content"] != DANA[0] and first.messages[-1]["content"].endswith(DANA[0])
    assert again.messages[-1] == {"role": "user", "content": DANA[0]}
    assert "## User context" in again.messages[0]["content"] and "## User context" not in again.messages[-1]["content"]


@pytest.mark.slow
async def test_a_no_answer_note_and_the_message_it_stands_in_for_are_shown_but_never_sent_to_the_model_again(cli, openai_stub):
    """The real 0.5B copied the note of one turn as its reply to the next ones; and with the message
    left in view unanswered, the turns after it gave no usable reply."""
    openai_stub.reset(script(lambda r: r.last_user_text))
    session, _ = cli()
    assert await session.send(DANA[0]) == no_answer_text("echo", DANA[0])
    openai_stub.reset(script(lambda r: "Short answers it is."))
    assert await session.send(DANA[1]) == "Short answers it is."
    (second,) = openai_stub.requests_of("reply")
    assert not any("No answer" in str(m["content"]) for m in second.messages)
    assert [m["role"] for m in second.messages] == ["system", "user"]  # neither her unanswered first line nor the note
    assert not any(DANA[0] in str(m["content"]) for m in second.messages)
    shown = [m.text for m in (await session.graph.aget_state(session.config)).values["messages"]]
    assert no_answer_text("echo", DANA[0]) in shown  # the transcript keeps it


@pytest.mark.slow
async def test_a_repeat_of_the_previous_reply_is_asked_again_then_replaced(cli, openai_stub):
    openai_stub.reset(script(lambda r: "Hello Dana, I can help with reminders, notes and questions about your day."))
    session, _ = cli()
    assert await session.send(DANA[0]) == "Hello Dana, I can help with reminders, notes and questions about your day."
    assert await session.send(DANA[1]) == no_answer_text("repeat", DANA[1])
    first, again = openai_stub.requests_of("reply")[-2:]
    assert nudged(again, "repeat")
    # Asked again sampling, not greedy: at temperature 0 the 0.5B gave the same words under the nudge.
    assert (first.body["temperature"], again.body["temperature"]) == (0, RETRY_TEMPERATURE)


@pytest.mark.slow
async def test_over_danas_four_lines_a_model_like_the_05b_shows_no_markup_no_echo_and_no_repeat(cli, openai_stub):
    """The measured failure: every line answered with Dana's first message, the first time after a
    raw </tool_response>. Asked again with the nudge this model answers; every reply is then a reply."""
    answers = iter(["Hello Dana!", "Short answers it is.", "I'll remind you about the passport.", "You are Dana, a nurse in Haifa."])

    def reply(request: StubRequest):
        if nudged(request, "echo") or nudged(request, "repeat"):
            return next(answers)
        return "</tool_response>\n" + first_user_line(request)

    openai_stub.reset(script(reply))
    session, out = cli()
    replies = [await session.send(line) for line in DANA]
    assert replies == ["Hello Dana!", "Short answers it is.", "I'll remind you about the passport.", "You are Dana, a nurse in Haifa."]
    assert not any(m in out.getvalue() for m in MARKUP)


@pytest.mark.slow
def test_the_http_token_stream_carries_no_markup_and_no_echo_that_was_asked_again(new_database, openai_stub):
    """The page shows the tokens as they come: markup never arrives, and an echo is held back while
    it may be one, so the stream carries only the answer that replaced it."""
    from tests.support.http_server import final, new_chat_behind_stub, reply_text, stream

    def reply(request: StubRequest):
        if nudged(request, "echo"):
            return "Noted: short answers."
        if request.last_user_text == DANA[0]:
            return "</tool_response>\nHello Dana.<|im_end|>\n<|im_start|>user\nmore"
        return request.last_user_text  # an echo

    openai_stub.reset(script(reply))
    with new_chat_behind_stub(new_database("markup"), openai_stub.base_url) as (client, chat_id):
        first = stream(client, "POST", f"/chats/{chat_id}/messages", {"text": DANA[0]})
        second = stream(client, "POST", f"/chats/{chat_id}/messages", {"text": DANA[1]})
    assert reply_text(first) == final(first).data["reply"] == "Hello Dana."
    assert reply_text(second) == final(second).data["reply"] == "Noted: short answers."


# The 0.5B's answers to Dana's first two lines (30 Nov 2026): the second is the first with three words
# left out. The stream let it out at "you're" (no longer the first's exact words), the reply node then
# found it a repeat and kept a note, and the chat showed the repeat while the transcript held the note.
FIRST_ANSWER = (
    "Hello Dana! I'm glad to hear that you're in Haifa and working as a nurse. It's great to have someone who can "
    "help you with your daily tasks and provide support when needed. What do you need assistance with today?"
)
NEAR_REPEAT = FIRST_ANSWER.replace("glad to hear that you're", "glad you're")


@pytest.mark.slow
async def test_a_near_repeat_the_node_replaces_is_never_what_the_chat_shows(cli, openai_stub):
    openai_stub.reset(script(lambda r: FIRST_ANSWER if r.last_user_text == DANA[0] else NEAR_REPEAT))
    session, out = cli()
    assert await session.send(DANA[0]) == FIRST_ANSWER
    shown = await session.send(DANA[1])
    stored = (await session.graph.aget_state(session.config)).values["messages"][-1].text
    assert shown == stored == no_answer_text("repeat", DANA[1])
    assert NEAR_REPEAT not in out.getvalue()


@pytest.mark.slow
def test_a_streamed_answer_the_node_replaced_is_withdrawn_in_the_stream(new_database, openai_stub):
    """A repeat with words put before it streams (it cannot be told from a fresh answer in time); the
    node asks again, and a ``replaced`` event puts the answer it kept in place of the one shown."""
    from tests.support.http_server import final, new_chat_behind_stub, reply_text, stream, token_text

    padded = "Well, well, well, so: " + FIRST_ANSWER

    def reply(request: StubRequest):
        if nudged(request, "repeat"):
            return "Short answers it is."
        return FIRST_ANSWER if request.last_user_text == DANA[0] else padded

    openai_stub.reset(script(reply))
    with new_chat_behind_stub(new_database("replaced"), openai_stub.base_url) as (client, chat_id):
        stream(client, "POST", f"/chats/{chat_id}/messages", {"text": DANA[0]})
        second = stream(client, "POST", f"/chats/{chat_id}/messages", {"text": DANA[1]})
    assert token_text(second).startswith("Well, well")  # shown as it came
    replaced = [e.data for e in second if e.name == "replaced"]
    assert replaced == [{"text": "Short answers it is.", "withdrawn": token_text(second)}]
    assert reply_text(second) == final(second).data["reply"] == "Short answers it is."
