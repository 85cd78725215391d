"""A message deleted outright leaves the agent's replies that quoted it, in every chat of the user,
but not the user's own other messages that share its words (real Postgres, the offline model)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

import nodes.reply as reply_node
from core.context import Context
from graph.assembly import compile_graph
from memory import episodes
from memory.chat_admin import delete_message_everywhere
from memory.forgetting import forget_message, forgotten_in
from storage import episodes as episode_table
from memory.user_memory import get_chat
from memory.writer.records import save_chat_record

SECRET = "My passport number is K4477123 and it expires soon"
QUESTION = "What was my passport number again?"


async def _said(pool, user_id: str, thread_id: str) -> list[str]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT content FROM memory_agent_episodes WHERE owner = %s AND thread_id = %s ORDER BY position", (user_id, thread_id))
        ).fetchall()
    return [r["content"] for r in rows]


async def test_deleting_a_message_rewrites_the_index_rows_of_replies_that_carried_its_words_not_the_users_messages(backend, minilm, user_id):
    told, asked = str(uuid.uuid4()), str(uuid.uuid4())
    await episodes.index_thread(backend.pool, minilm.embeddings, user_id, told, [HumanMessage(SECRET, id="s"), AIMessage("Noted.", id="n")])
    quoting = [
        HumanMessage(QUESTION, id="q"),
        AIMessage("Your passport number is K4477123. Your flight leaves at nine.", id="r"),
        HumanMessage("I need passport photos by Friday", id="p"),
    ]
    await episodes.index_thread(backend.pool, minilm.embeddings, user_id, asked, quoting)

    await forget_message(backend.store, user_id, told, "s", SECRET)  # DELETE /chats/{told}/messages/s

    assert await _said(backend.pool, user_id, told) == ["[forgotten]", "Noted."]
    question, reply, photos = await _said(backend.pool, user_id, asked)
    assert "K4477123" not in reply and "passport" not in reply.lower() and "flight leaves at nine" in reply
    assert (question, photos) == (QUESTION, "I need passport photos by Friday")  # the user's own statements stay
    # and a later write of the same thread (a sync, a reindex) keeps the reply redacted
    await episode_table.delete_thread(backend.pool, user_id, asked)
    await episodes.index_thread(backend.pool, minilm.embeddings, user_id, asked, quoting)
    assert await _said(backend.pool, user_id, asked) == [question, reply, photos]


@pytest.mark.slow  # turns of two chats
async def test_a_deleted_message_leaves_the_replies_of_other_chats_that_quoted_it_but_not_the_users_own_words(backend, user_id, monkeypatch):
    prompts: list[str] = []
    real = reply_node.reply_prompt

    def spy(*a, **k):
        built, this_turn = real(*a, **k)
        prompts.append("\n".join(m.text for m in built.messages))
        return built, this_turn

    monkeypatch.setattr(reply_node, "reply_prompt", spy)
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model="offline")
    told, asked = str(uuid.uuid4()), str(uuid.uuid4())

    async def say(thread_id: str, text: str) -> None:
        await graph.ainvoke({"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, {"configurable": {"thread_id": thread_id}}, context=ctx)

    await say(told, SECRET)
    await say(told, "The van is booked for the move")
    await say(asked, QUESTION)
    values = (await graph.aget_state({"configurable": {"thread_id": asked}})).values
    quoting = next(m for m in values["messages"] if isinstance(m, AIMessage) and "K4477123" in m.text)  # the reply quoted it
    # A chat's text that took a reply's quote in (here by hand: the offline model's reply restates memory, which the text leaves out)
    chat = await get_chat(backend.store, user_id, asked)
    chat.summary_text += "\nYou said your passport number is K4477123."
    await save_chat_record(backend.store, user_id, chat)
    secret = next(m for m in (await graph.aget_state({"configurable": {"thread_id": told}})).values["messages"] if "K4477123" in m.text)

    await delete_message_everywhere(backend, graph, user_id, told, secret)

    record = (await get_chat(backend.store, user_id, asked)).summary_text
    assert "K4477123" not in record and "passport" in record.lower()  # the chat's text: the reply's copy goes, the question stays
    assert quoting.id in await forgotten_in(backend.store, user_id, asked, values["messages"])  # the transcript marks the reply

    mark = len(prompts)
    await say(asked, "Thanks, anything else to prepare?")
    later = "\n".join(prompts[mark:])
    assert later and "K4477123" not in later  # not in the model's view of the reply, nor in an excerpt
    assert QUESTION in later  # the user's own question reaches the model as they wrote it
