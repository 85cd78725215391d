"""A chat's vector (what "find the chat about X" and related chats search) is kept by a turn only
while every part it was made from is still in the chat's text, for at most VECTOR_LAG_MESSAGES
messages; a forget, a deletion, an edit or a rename makes it again (real Postgres)."""

from __future__ import annotations

import uuid

import pytest
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


@pytest.mark.slow
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


@pytest.mark.slow
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


async def test_a_rename_makes_the_chats_text_and_vector_again_from_the_new_title_at_once(backend, user_id):
    from memory.writer.records import rename_chat

    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "Help me plan meals for the week")
    made, _ = await vector_row(backend, user_id, thread, "")
    chat = await get_chat(backend.store, user_id, thread)
    old_title = chat.title
    assert chat.summary_text.startswith(old_title + "\n")
    await rename_chat(backend.store, user_id, chat, "Vegan meal prep")
    renamed, _ = await vector_row(backend, user_id, thread, "")
    chat = await get_chat(backend.store, user_id, thread)
    assert renamed != made and chat.vector_parts == []
    # found by the name it has now, not the one it had, before any next turn
    assert chat.summary_text.startswith("Vegan meal prep\n") and old_title not in chat.summary_text.splitlines()
    assert "Opening: Help me plan meals for the week" in chat.summary_text
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999
    await turn(backend, user_id, thread, "I would like more lentils")
    chat = await get_chat(backend.store, user_id, thread)
    assert chat.summary_text.startswith("Vegan meal prep")
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999 and chat.vector_messages == chat.message_count


async def assert_vector_is_of_the_text(backend, user_id: str, thread: str) -> str:
    chat = await get_chat(backend.store, user_id, thread)
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999, (similarity, chat.summary_text)
    return chat.summary_text


@pytest.mark.slow
async def test_a_line_pushed_out_of_the_text_by_a_long_message_leaves_the_vector_with_it(backend, user_id):
    thread = str(uuid.uuid4())
    for text in ("Let us talk about my garden", "The roses need pruning", "My bank is Zorblatt Savings and it charged me twice", "Also the tulips"):
        await turn(backend, user_id, thread, text)
    await turn(backend, user_id, thread, "Here is the whole seed catalogue I pasted: " + "marigold " * 80)
    text = await assert_vector_is_of_the_text(backend, user_id, thread)
    assert "Zorblatt" not in text  # so the forget, which reads the text, misses nothing the vector holds
    await forget(backend.store, user_id, [], words="Zorblatt Savings")
    await assert_vector_is_of_the_text(backend, user_id, thread)


async def chat_whose_vector_holds(backend, user_id: str, secret_line: str, marker: str) -> tuple[object, str, HumanMessage]:
    """(graph, thread, the message) of a chat of four turns, the last saying ``secret_line``; its
    vector, made again at the fourth turn (the lag), holds that line."""
    graph = compile_graph(backend.checkpointer, backend.store)
    thread = str(uuid.uuid4())
    for text in ("Let us plan the move to Haifa", "The flat has two rooms", "We leave in May", secret_line):
        await turn(backend, user_id, thread, text)
    assert marker in await assert_vector_is_of_the_text(backend, user_id, thread)
    state = await graph.aget_state({"configurable": {"thread_id": thread}})
    return graph, thread, next(m for m in state.values["messages"] if isinstance(m, HumanMessage) and marker in m.text)


@pytest.mark.slow
async def test_a_deleted_message_leaves_the_chats_text_and_vector_at_once_and_after_its_next_turn(backend, user_id):
    from memory.chat_admin import delete_message_everywhere

    graph, thread, secret = await chat_whose_vector_holds(backend, user_id, "My passport number is K4477123", "K4477123")
    await delete_message_everywhere(backend, graph, user_id, thread, secret)
    # at once: the chat may never have another turn (before, the text and the vector kept it until then)
    assert "K4477123" not in await assert_vector_is_of_the_text(backend, user_id, thread)
    await turn(backend, user_id, thread, "The van is booked")
    assert "K4477123" not in await assert_vector_is_of_the_text(backend, user_id, thread)


@pytest.mark.slow
async def test_deleting_the_opening_message_takes_the_title_made_from_it_but_not_one_the_user_set(backend, user_id):
    from memory.chat_admin import delete_message_everywhere
    from memory.writer.records import rename_chat

    graph = compile_graph(backend.checkpointer, backend.store)
    for title_by_user in (False, True):
        thread = str(uuid.uuid4())
        await turn(backend, user_id, thread, "My divorce lawyer Priya Ramaswamy called again")
        await turn(backend, user_id, thread, "What should I cook tonight")
        if title_by_user:
            await rename_chat(backend.store, user_id, await get_chat(backend.store, user_id, thread), "Evening")
        made = (await get_chat(backend.store, user_id, thread)).title
        assert title_by_user or "Priya" in made
        state = await graph.aget_state({"configurable": {"thread_id": thread}})
        opening = next(m for m in state.values["messages"] if isinstance(m, HumanMessage))
        await delete_message_everywhere(backend, graph, user_id, thread, opening)
        chat = await get_chat(backend.store, user_id, thread)
        assert "Priya" not in chat.summary_text
        assert chat.title == "Evening" if title_by_user else chat.title.startswith("Chat of ")
        await assert_vector_is_of_the_text(backend, user_id, thread)


@pytest.mark.slow
async def test_an_edit_of_the_newest_message_makes_the_vector_again_at_its_turn(backend, user_id):
    from app.http.routes_chats import checkpoint_before

    graph, thread, pasted = await chat_whose_vector_holds(backend, user_id, "I pasted my card number 4111 1111 1111 1111 by mistake", "4111")
    fork = await checkpoint_before(graph, thread, pasted.id)
    await graph.ainvoke({"messages": [HumanMessage("I pasted the wrong thing")]}, fork, context=Context(user_id=user_id, model="offline"))
    text = await assert_vector_is_of_the_text(backend, user_id, thread)
    assert "4111" not in text


async def test_a_turns_record_built_before_a_forget_committed_is_redacted_when_it_is_written(backend, user_id):
    """The race a turn loses to a forget: the turn read the ledger, the forget wrote it and rewrote
    the chats (this one did not carry the words yet), then the turn writes its text."""
    from memory.writer.records import save_chat_record

    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "Let us talk about gardening on my balcony")
    stored = await get_chat(backend.store, user_id, thread)
    await forget(backend.store, user_id, [], words="Zorblatt Savings")
    late = stored.model_copy(update={"summary_text": stored.summary_text + "\nRecently: My bank is Zorblatt Savings", "message_count": 4})
    await save_chat_record(backend.store, user_id, late, read_before=stored, parts=stored.vector_parts)
    assert "Zorblatt" not in await assert_vector_is_of_the_text(backend, user_id, thread)


async def test_a_turns_record_written_after_a_rename_keeps_the_new_title_in_its_text(backend, user_id):
    from memory.writer.records import rename_chat, save_chat_record

    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, "Help me plan meals for the week")
    stored = await get_chat(backend.store, user_id, thread)
    built = stored.model_copy()  # what a turn running now built, from the record before the rename
    built.summary_text = f"{stored.summary_text}\nRecently: more lentils"
    await rename_chat(backend.store, user_id, stored, "Vegan meal prep")

    await save_chat_record(backend.store, user_id, built, read_before=stored, parts=list(stored.vector_parts))

    chat = await get_chat(backend.store, user_id, thread)
    assert chat.title == "Vegan meal prep" and chat.summary_text.startswith("Vegan meal prep\n")
    assert stored.title not in chat.summary_text.splitlines() and chat.summary_text.endswith("Recently: more lentils")
    _, similarity = await vector_row(backend, user_id, thread, chat.summary_text)
    assert similarity > 0.999
