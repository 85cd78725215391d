"""Importing a chat history (ours and LoCoMo's format) on the embedded Postgres, offline model.

The import runs the memory nodes as a chat does: each exchange is added as if ``reply`` had
produced it and the graph goes on (summarize, extract_memories, and whatever follows reply).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from core.context import Context
from core.messages import sent_at
from graph.assembly import compile_graph
from memory.chat_import import InvalidImport, locomo_chat, parse_import
from memory.import_job import import_chat
from memory.user_memory import get_chat, list_chats, list_facts
from storage import thread_owners
from tests.support.locomo_sample import locomo_sample


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


async def _state(graph, chat_id: str) -> dict:
    return (await graph.aget_state({"configurable": {"thread_id": chat_id}})).values


@pytest.mark.slow
async def test_a_locomo_conversation_imports_both_speakers_with_session_times_and_runs_the_memory_nodes(backend, graph, user_id):
    [chat] = parse_import(locomo_sample())
    done = await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))

    values = await _state(graph, done.chat_id)
    messages = values["messages"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, HumanMessage, AIMessage, AIMessage, HumanMessage, HumanMessage, AIMessage]
    assert messages[0].text == "Caroline: Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful."
    assert messages[2].text.endswith("[shared a photo of a university brochure]")
    assert sent_at(messages[0]) == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert sent_at(messages[3]) == datetime(2023, 5, 8, 13, 59, tzinfo=timezone.utc)  # one minute a turn
    assert sent_at(messages[4]) == datetime(2023, 5, 25, 19, 55, tzinfo=timezone.utc)
    assert done.id_map["D2:3"] == messages[6].id
    # The chat is the user's like any chat, and the memory nodes ran after every exchange.
    assert await thread_owners.owner_of(backend.pool, done.chat_id) == user_id
    record = await get_chat(backend.store, user_id, done.chat_id)
    assert record.title == "Caroline and Melanie" and record.title_by_user
    assert record.message_count == len(messages)  # written by summarize after the last exchange
    assert values["user_turns"] == 3  # counted as load_context counts turns (extract_every_n_turns reads it)
    assert any("Oliver" in f.text or "counsel" in f.text.lower() for f in await list_facts(backend.store, user_id))


@pytest.mark.slow
async def test_our_json_format_imports_with_its_times_title_and_an_unanswered_last_message(backend, graph, user_id):
    data = {
        "title": "Moving to Lisbon",
        "messages": [
            {"role": "user", "text": "I am moving to Lisbon in March.", "time": "2024-01-05T09:00:00Z"},
            {"role": "assistant", "text": "Exciting! Do you need help with the paperwork?", "time": "2024-01-05T09:00:20+00:00"},
            {"role": "user", "text": "My name is Ana and I work as a nurse.", "time": "2024-01-06T10:00:00"},
        ],
    }
    [chat] = parse_import(data)
    done = await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))

    messages = (await _state(graph, done.chat_id))["messages"]
    assert [m.text for m in messages] == [m["text"] for m in data["messages"]]
    assert sent_at(messages[2]) == datetime(2024, 1, 6, 10, 0, tzinfo=timezone.utc)  # no zone: UTC
    assert [c.title for c in await list_chats(backend.store, user_id)] == ["Moving to Lisbon"]
    # The last message has no reply; memory still learns from it (extract_memories ran without a reply).
    assert any("nurse" in f.text.lower() for f in await list_facts(backend.store, user_id))


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "text": "hi", "time": "2024-01-01T00:00:00Z"}, {"role": "assistant", "text": "  ", "time": "2024-01-01T00:01:00Z"}]}, "messages.1"),
        ({"messages": [{"role": "user", "text": "a\x00b", "time": "2024-01-01T00:00:00Z"}]}, "NUL"),
        ({"messages": [{"role": "system", "text": "hi", "time": "2024-01-01T00:00:00Z"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "text": "hi"}]}, "messages.0.time"),
        ({"messages": [{"role": "user", "text": "hi", "time": "yesterday"}]}, "messages.0.time"),
        ({"messages": [{"role": "user", "text": "b", "time": "2024-01-02T00:00:00Z"}, {"role": "user", "text": "a", "time": "2024-01-01T00:00:00Z"}]}, "earlier"),
        ({"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "someday", "session_1": [{"speaker": "A", "text": "hi"}]}}, "session_1_date_time"),
        ({"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": [{"speaker": "C", "text": "hi"}]}}, "speaker 'C'"),
        ({"something": "else"}, "docs/import.md"),
    ],
)
async def test_bad_input_is_refused_naming_the_problem_and_nothing_is_created(backend, graph, user_id, bad, says):
    with pytest.raises(InvalidImport, match=None) as caught:
        [chat] = parse_import(bad)
        await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))
    assert says in str(caught.value)
    assert await thread_owners.threads_of(backend.pool, user_id) == []
    assert await list_chats(backend.store, user_id) == []


async def test_a_message_over_the_limit_is_imported_in_parts_that_join_back_into_it(backend, graph, user_id):
    """One pasted log over 20,000 characters refused the whole history (an export: every conversation)."""
    log = "\n\n".join(f"Paragraph {i}: " + "the build failed again on step seven. " * 12 for i in range(100))  # ~47,000
    data = {"messages": [
        {"role": "user", "text": "Here is the log of my Lisbon build:\n\n" + log, "time": "2024-01-05T09:00:00Z", "source_id": "m1"},
        {"role": "assistant", "text": "Step seven fails: check the cache.", "time": "2024-01-05T09:01:00Z", "source_id": "m2"},
    ]}  # fmt: skip
    [chat] = parse_import(data)
    done = await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))

    assert chat.split_messages == 1
    texts = [m.text for m in (await _state(graph, done.chat_id))["messages"]]
    assert len(texts) == 4 and all(len(t) <= 20_000 for t in texts) and texts[-1] == "Step seven fails: check the cache."
    assert "".join(texts[:-1]) == data["messages"][0]["text"].rstrip()
    assert all(t.startswith("Paragraph ") for t in texts[1:-1])  # cut at a paragraph break
    assert done.id_map["m1"] == (await _state(graph, done.chat_id))["messages"][0].id  # the first part stands for it


def test_a_list_of_locomo_samples_is_one_chat_each():
    chats = parse_import([locomo_sample("a"), locomo_sample("b")], title="LoCoMo")
    assert [c.title for c in chats] == ["LoCoMo (1)", "LoCoMo (2)"]
    assert locomo_chat(locomo_sample()).messages[1].role == "assistant"


@pytest.mark.slow
async def test_two_messages_with_one_source_id_all_import_and_the_id_map_names_the_first(backend, graph, user_id):
    """A source id given twice in one history: both messages are imported (ids by position); the id map,
    which has room for one, named the later one on a fresh import and the earlier one for exchanges a
    resume found done: now the first, always."""
    data = {"title": "Twice", "messages": [
        {"role": "user", "text": "I live in Porto.", "time": "2024-01-05T09:00:00Z", "source_id": "same"},
        {"role": "assistant", "text": "Nice city.", "time": "2024-01-05T09:00:10Z", "source_id": "same"},
    ]}  # fmt: skip
    [chat] = parse_import(data)
    done = await import_chat(graph, backend.pool, user_id, chat, context=Context(user_id=user_id, model="offline"))

    messages = (await _state(graph, done.chat_id))["messages"]
    assert [m.text for m in messages] == ["I live in Porto.", "Nice city."] and messages[0].id != messages[1].id
    assert done.id_map == {"same": messages[0].id}
