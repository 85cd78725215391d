"""Memory you can see working offline: the offline model answers "when did I say I was moving?"
with what the user said, dated and named by its chat; and a chat where the user only asked is
not offered as a related chat (embedded Postgres, the real MiniLM, the offline model)."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage

from core.context import Context
from core.messages import stamp_sent_at
from graph.assembly import compile_graph
from memory.user_memory import get_chat
from tests.support.graph_turns import new_thread, stream_turn

MOVING = "I'm moving to Lisbon in the spring, the flat is already booked."
QUESTION = "When did I say I was moving?"
SAID_ON = datetime(2025, 3, 2, 18, 30, tzinfo=timezone.utc)


async def say(graph, user: str, text: str, config: dict | None = None, when: datetime | None = None):
    config = config or new_thread()
    message = HumanMessage(text, id=str(uuid.uuid4()))
    payload = {"messages": [stamp_sent_at(message, when) if when else message]}
    turn = await stream_turn(graph, payload, config, Context(user_id=user, model="offline"))
    return config, turn


@pytest.mark.slow
async def test_offline_when_did_i_say_i_was_moving_is_answered_with_the_dated_excerpt_and_its_chat(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    moving, _ = await say(graph, user_id, MOVING, when=SAID_ON)
    title = (await get_chat(backend.store, user_id, moving["configurable"]["thread_id"])).title

    _, turn = await say(graph, user_id, QUESTION)
    reply = turn.final_reply.text
    assert reply.startswith("(offline model) ")
    assert f"On 2 March 2025, in '{title}', you said: \"{MOVING}\"" in reply, reply
    assert turn.streamed_reply == reply  # what streams is what is stored


@pytest.mark.slow
async def test_the_users_own_earlier_question_is_neither_quoted_nor_offered_as_a_related_chat(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    moving, _ = await say(graph, user_id, MOVING, when=SAID_ON)
    asked_before, _ = await say(graph, user_id, QUESTION)  # a chat of the same question alone
    asked_chat = await get_chat(backend.store, user_id, asked_before["configurable"]["thread_id"])
    assert asked_chat.user_statements == 0

    _, turn = await say(graph, user_id, QUESTION)
    related = [c["thread_id"] for c in turn.values["loaded_context"]["related_chats"]]
    assert asked_before["configurable"]["thread_id"] not in related, turn.values["loaded_context"]["related_chats"]
    reply = turn.final_reply.text
    assert "you said: \"When did I say" not in reply and f'you said: "{MOVING}"' in reply, reply


@pytest.mark.slow
async def test_a_chat_where_the_user_stated_something_on_the_topic_is_still_offered(backend, user_id):
    graph = compile_graph(backend.checkpointer, backend.store)
    moving, _ = await say(graph, user_id, MOVING, when=SAID_ON)
    await say(graph, user_id, "Moving to Lisbon: what should I pack first?", moving)
    assert (await get_chat(backend.store, user_id, moving["configurable"]["thread_id"])).user_statements == 1

    _, turn = await say(graph, user_id, "What do I need for my move to Lisbon in the spring?")
    related = [c["thread_id"] for c in turn.values["loaded_context"]["related_chats"]]
    assert moving["configurable"]["thread_id"] in related, turn.values["loaded_context"]
