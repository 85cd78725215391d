"""A chat's vector (what "find the chat about X" and related chats search) is made again only when
its text's head changed, or after VECTOR_LAG_MESSAGES messages, or by a forget (real Postgres)."""

from __future__ import annotations

import uuid

from langchain_core.messages import HumanMessage

from core.context import Context
from core.namespaces import chats_ns
from graph.assembly import compile_graph
from memory.forgetting import forget
from memory.user_memory import get_chat
from memory.writer.records import VECTOR_LAG_MESSAGES
from storage.vector_literal import vector_literal


async def turn(backend, user_id: str, thread_id: str, text: str) -> None:
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread_id}}, context=Context(user_id=user_id, model="offline"))


async def vector_row(backend, user_id: str, thread_id: str, text: str) -> tuple[object, float]:
    """(the row's updated_at, its cosine similarity to ``text``'s embedding)."""
    query = vector_literal(await backend.store.embeddings.aembed_query(text))
    async with backend.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT updated_at AS made, 1 - (embedding <=> %s::vector) AS similarity FROM store_vectors WHERE prefix = %s AND key = %s",
            (query, ".".join(chats_ns(user_id)), thread_id),
        )
        rows = await cur.fetchall()
    assert len(rows) == 1, rows
    return rows[0]["made"], float(rows[0]["similarity"])


async def test_a_turn_that_leaves_the_chats_head_alone_keeps_its_vector_and_its_text_moves_on(backend, user_id):
    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "I am planning a trip to Lisbon with my sister in June")
    first_text = (await get_chat(backend.store, user_id, thread)).summary_text
    made, similarity = await vector_row(backend, user_id, thread, first_text)
    assert similarity > 0.999

    await turn(backend, user_id, thread, "We also want to see the tiled houses of Porto")
    chat = await get_chat(backend.store, user_id, thread)
    assert "Porto" in chat.summary_text  # the stored text (shown, searched by words) is the turn's
    kept, similarity = await vector_row(backend, user_id, thread, first_text)
    assert kept == made and similarity > 0.999  # the vector was not made again (~0.4 ms of CPU a token)
    assert chat.vector_messages == 2 and chat.message_count == 4


async def test_the_chats_vector_catches_up_once_it_lags_the_allowed_number_of_messages(backend, user_id):
    thread = str(uuid.uuid4())
    lines = ["I keep bees on the roof of my flat", "The hives need checking every week", "One queen died in the cold", "I ordered a new queen from Slovenia"]
    for text in lines:
        await turn(backend, user_id, thread, text)
        chat = await get_chat(backend.store, user_id, thread)
        assert 0 <= chat.message_count - chat.vector_messages < VECTOR_LAG_MESSAGES
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert chat.vector_messages == chat.message_count == 2 * len(lines)  # made again at the fourth turn
    assert similarity > 0.999


async def test_a_forget_makes_the_chats_vector_again_from_the_redacted_text_at_once(backend, user_id):
    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "Let us talk about gardening on my balcony")
    await turn(backend, user_id, thread, "My bank is Zorblatt Savings and it charged me twice")
    chat = await get_chat(backend.store, user_id, thread)
    assert "Zorblatt" in chat.summary_text and chat.vector_messages == 2  # the vector lags: made before that line

    await forget(backend.store, user_id, [], words="Zorblatt Savings")

    chat = await get_chat(backend.store, user_id, thread)
    assert "Zorblatt" not in chat.summary_text
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999 and chat.vector_messages == chat.message_count
    # and the next turn does not bring back a vector of the unredacted text
    await turn(backend, user_id, thread, "Tomatoes grow well there")
    chat = await get_chat(backend.store, user_id, thread)
    assert "Zorblatt" not in chat.summary_text


async def test_a_new_title_makes_the_chats_vector_again_at_once(backend, user_id):
    from memory.writer.records import rename_chat

    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "Help me plan meals for the week")
    chat = await get_chat(backend.store, user_id, thread)
    await rename_chat(backend.store, user_id, chat, "Vegan meal prep")
    await turn(backend, user_id, thread, "I would like more lentils")
    chat = await get_chat(backend.store, user_id, thread)
    assert chat.summary_text.startswith("Vegan meal prep")
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999 and chat.vector_messages == chat.message_count
