"""ChatGPT's and Claude's ``conversations.json`` imported as they come (embedded Postgres).

The fixtures (tests/fixtures/exports/) are small exports in the products' shapes: ChatGPT's
with an edited question and a regenerated reply (branches), a hidden system message, custom
instructions, a tool call and a photo with a caption; Claude's with text blocks beside a
thinking block, a failed (empty) reply and an empty conversation. The import runs the offline
model; the question afterwards runs a scripted model so the reply prompt can be read.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from core.context import Context
from core.messages import sent_at
from graph.assembly import compile_graph
from memory import queries
from memory.chat_admin import delete_chat
from memory.chat_import import ChatImport, check_all, parse_import
from memory.import_job import import_chat
from memory.user_memory import get_chat, get_user_document, list_chats
from prompts.reply_prompt import EPISODES_HEADER, parse_sections
from storage import thread_owners
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "exports"


def export(name: str):
    return json.loads((EXPORTS / name).read_text())


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


async def import_all(graph, backend, user_id: str, data) -> list:
    chats = parse_import(data)
    context = Context(user_id=user_id, model="offline")
    check_all(chats, context.max_message_chars)
    return [await import_chat(graph, backend.pool, user_id, chat, context=context) for chat in chats]


async def messages_of(graph, chat_id: str) -> list:
    return (await graph.aget_state({"configurable": {"thread_id": chat_id}})).values.get("messages", [])  # none before the first exchange


async def reply_prompt_excerpts(graph, user_id: str, question: str) -> str:
    """The excerpts of what was said that reach the reply prompt for ``question``, in a new chat."""
    with registered_scripted_model(plain_answers(extract=lambda _t: empty_extraction(), title="A chat", summary="Talked.", reply="Noted.")) as (name, model):
        await stream_turn(graph, question, new_thread(), Context(user_id=user_id, model=name))
        return parse_sections(model.calls_of("reply")[-1]).get(EPISODES_HEADER, "")


def utc(*parts) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


@pytest.mark.slow
async def test_a_chatgpt_export_becomes_one_chat_per_conversation_with_its_title_times_and_current_branch(backend, graph, user_id):
    done = await import_all(graph, backend, user_id, export("chatgpt_conversations.json"))

    assert [d.title for d in done] == ["Moving to Lisbon", "Sourdough starter smell", "Birthday gift for Tomás"]  # oldest first
    chats = {c.title: c for c in await list_chats(backend.store, user_id)}
    assert set(chats) == {"Moving to Lisbon", "Sourdough starter smell", "Birthday gift for Tomás"}
    assert all(c.title_by_user for c in chats.values())
    lisbon = chats["Moving to Lisbon"]
    assert lisbon.created_at == datetime.fromtimestamp(1709370000.0 - 5.2, tz=timezone.utc)  # the conversation's create_time
    assert lisbon.last_activity == datetime.fromtimestamp(1709370000.0 + 851.2, tz=timezone.utc)  # its last message's time

    # Only the branch last shown: the edited question, the regenerated reply; no system, hidden or edited-away message.
    messages = await messages_of(graph, done[0].chat_id)
    assert [m.type for m in messages] == ["human", "ai", "human", "ai"]
    assert messages[0].text.startswith("I'm moving to Lisbon in March for a new job")
    assert messages[1].text.startswith("Congratulations on the job at Santa Maria!")
    assert sent_at(messages[0]) == datetime.fromtimestamp(1709370060.3, tz=timezone.utc)
    texts = " ".join(m.text for m in messages)
    assert "Porto" not in texts and "Start with your visa" not in texts  # the other branches
    assert "Be brief" not in texts and "I am a nurse" not in texts  # custom instructions: hidden
    profile = (await get_user_document(backend.store, user_id)).profile
    assert not profile.role  # nor learned from: the hidden "I am a nurse" never reached the memory steps

    # Tool calls and results are left out; a photo's caption stays.
    sourdough = [m.text for m in await messages_of(graph, done[1].chat_id)]
    assert sourdough == [
        "My sourdough starter smells like nail polish remover. Is it dead?",
        "It isn't dead: an acetone smell means the starter is hungry. Feed it twice a day at room temperature for a few days.",
        "Here it is after two feedings. I named the starter Clint Yeastwood.",
        "Clint Yeastwood looks lively: lots of bubbles and a domed top. It's ready to bake with.",
    ]
    assert sorted(await thread_owners.threads_of(backend.pool, user_id)) == sorted(d.chat_id for d in done)


@pytest.mark.slow
async def test_a_question_about_an_imported_chatgpt_conversation_is_answered_from_it(backend, graph, user_id):
    await import_all(graph, backend, user_id, export("chatgpt_conversations.json"))

    excerpts = await reply_prompt_excerpts(graph, user_id, "What did I name my sourdough starter?")
    assert "I named the starter Clint Yeastwood" in excerpts
    assert '"Sourdough starter smell"' in excerpts and "10 April 2024" in excerpts  # named by its chat, dated as said


@pytest.mark.slow
async def test_a_claude_export_becomes_one_chat_per_conversation_and_a_question_is_answered_from_it(backend, graph, user_id):
    done = await import_all(graph, backend, user_id, export("claude_conversations.json"))

    # The empty conversation is left out; titles and times are the export's.
    assert [d.title for d in done] == ["Planning an October trip to Kyoto", "Cello practice routine", "Flattening a list in Python"]
    kyoto = await get_chat(backend.store, user_id, done[0].chat_id)
    assert kyoto.created_at == utc(2024, 5, 4, 7, 15, 2, 118245) and kyoto.last_activity == utc(2024, 5, 4, 7, 31, 40, 902311)
    kyoto_messages = await messages_of(graph, done[0].chat_id)
    assert kyoto_messages[1].text == (
        "For temples and walks, stay near Higashiyama.\n\n"
        "Shigetsu at Tenryu-ji in Arashiyama serves excellent shojin ryori (Buddhist vegetarian cuisine)."
    )  # the text blocks, not the thinking block
    cello = await messages_of(graph, done[1].chat_id)
    assert [m.type for m in cello] == ["human", "human", "ai"]  # the failed, empty reply is skipped

    excerpts = await reply_prompt_excerpts(graph, user_id, "Which Bach piece did my cello teacher give me to practise?")
    assert "practise the Bach prelude in G major" in excerpts and '"Cello practice routine"' in excerpts
    assert "19 July 2024" in excerpts


@pytest.mark.slow
async def test_an_imported_conversation_is_found_in_the_month_it_happened_not_in_the_month_it_was_imported(backend, graph, user_id):
    done = await import_all(graph, backend, user_id, export("chatgpt_conversations.json"))
    lisbon = done[0].chat_id

    march = await queries.search_conversation_history(backend.store, None, user_id, "moving to Lisbon", "2024-03-01..2024-03-31")
    assert lisbon in {h.chat_id for h in march.summaries}
    assert {m.chat_id for m in march.messages} == {lisbon}
    june = await queries.search_conversation_history(backend.store, None, user_id, "moving to Lisbon", "2024-06-01..2024-06-30")
    assert lisbon not in {h.chat_id for h in june.summaries}
    today = await queries.search_conversation_history(backend.store, None, user_id, "moving to Lisbon", "7d")
    assert today.summaries == [] and today.messages == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["chatgpt_conversations.json", "claude_conversations.json"])
async def test_importing_the_same_export_twice_adds_nothing(backend, graph, user_id, name):
    first = await import_all(graph, backend, user_id, export(name))
    threads = sorted(await thread_owners.threads_of(backend.pool, user_id))
    counts = {d.chat_id: len(await messages_of(graph, d.chat_id)) for d in first}

    again = await import_all(graph, backend, user_id, export(name))

    assert all(d.already_imported and d.messages == 0 for d in again)
    assert [d.chat_id for d in again] == [d.chat_id for d in first]  # each names the chat that holds it
    assert sorted(await thread_owners.threads_of(backend.pool, user_id)) == threads
    assert len(await list_chats(backend.store, user_id)) == len(first)
    assert {d.chat_id: len(await messages_of(graph, d.chat_id)) for d in first} == counts


async def test_two_imports_of_one_conversation_at_once_make_one_chat(backend, graph, user_id):
    [chat] = parse_import([export("claude_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    results = await asyncio.gather(*(import_chat(graph, backend.pool, user_id, chat, context=context) for _ in range(2)))
    assert sorted(r.already_imported for r in results) == [False, True]
    assert all(r.not_added is None for r in results)  # the second was not added because it is being imported, not "changed"
    assert len({r.chat_id for r in results}) == 1
    assert await thread_owners.threads_of(backend.pool, user_id) == [results[0].chat_id]


async def test_a_deleted_imported_chat_can_be_imported_again(backend, graph, user_id):
    data = [export("claude_conversations.json")[2]]
    [first] = await import_all(graph, backend, user_id, data)
    await delete_chat(backend, user_id, first.chat_id)
    [second] = await import_all(graph, backend, user_id, data)
    assert not second.already_imported and second.chat_id != first.chat_id and second.messages == 2


async def test_another_user_importing_the_same_export_gets_their_own_chats(backend, graph, user_id):
    data = [export("claude_conversations.json")[2]]
    [mine] = await import_all(graph, backend, user_id, data)
    [theirs] = await import_all(graph, backend, f"{user_id}-other", data)
    assert not theirs.already_imported and theirs.chat_id != mine.chat_id
    assert await thread_owners.owner_of(backend.pool, theirs.chat_id) == f"{user_id}-other"


@pytest.mark.slow
async def test_a_conversation_whose_import_stopped_part_way_goes_on_when_the_export_is_imported_again(backend, graph, user_id, monkeypatch):
    from memory.import_job import ImportStopped
    from storage import chat_imports

    # The first look comes before the two exchanges can end (at the default half second a quiet
    # machine imported the whole chat first, and nothing stopped).
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 0.001)

    [chat] = parse_import([export("chatgpt_conversations.json")[2]])  # "Moving to Lisbon": 4 messages, 2 exchanges
    context = Context(user_id=user_id, model="offline")

    async def leave() -> bool:  # the client left at the first look
        return True

    with pytest.raises(ImportStopped) as stopped:
        await import_chat(graph, backend.pool, user_id, chat, context=context, stop_when=leave)
    chat_id = stopped.value.chat_id
    assert len(await messages_of(graph, chat_id)) < 4

    [again] = await import_all(graph, backend, user_id, [export("chatgpt_conversations.json")[2]])
    assert again.chat_id == chat_id and not again.already_imported and again.messages == 4
    assert [m.text[:12] for m in await messages_of(graph, chat_id)] == ["I'm moving t", "Congratulati", "Thanks. My l", "Alfama is a "]


def first_part(chat, n: int):
    """The conversation as an earlier export held it: its first ``n`` messages."""
    return chat.model_copy(update={"messages": chat.messages[:n]})


@pytest.mark.slow
async def test_a_conversation_that_grew_since_its_import_gets_its_new_messages_on_the_end_of_its_chat(backend, graph, user_id):
    from memory.import_job import message_id

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])  # "Moving to Lisbon": 4 messages, 2 exchanges
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, first_part(whole, 2), context=context)

    grown = await import_chat(graph, backend.pool, user_id, whole, context=context)

    assert grown.chat_id == before.chat_id and not grown.already_imported
    assert (grown.held_before, grown.messages, grown.exchanges) == (2, 4, 1)
    assert grown.first_time == whole.messages[2].time
    messages = await messages_of(graph, grown.chat_id)
    assert [m.text[:12] for m in messages] == ["I'm moving t", "Congratulati", "Thanks. My l", "Alfama is a "]
    assert [m.id for m in messages] == [message_id(grown.chat_id, i) for i in range(4)]
    assert await thread_owners.threads_of(backend.pool, user_id) == [grown.chat_id]
    record = await get_chat(backend.store, user_id, grown.chat_id)
    assert record.message_count == 4 and record.last_activity == whole.messages[-1].time
    # The new exchange went through the memory phase: it is searchable like the first.
    found = await queries.search_conversation_history(backend.store, None, user_id, "Alfama neighbourhood", "all")
    assert any("Alfama" in m.snippet and m.chat_id == grown.chat_id for m in found.messages)

    again = await import_chat(graph, backend.pool, user_id, whole, context=context)  # the same export once more
    assert again.already_imported and again.not_added is None and again.messages == 0
    older = await import_chat(graph, backend.pool, user_id, first_part(whole, 2), context=context)  # an older export
    assert older.already_imported and older.not_added is None
    assert len(await messages_of(graph, grown.chat_id)) == 4


@pytest.mark.slow
async def test_a_grown_conversation_whose_chat_lost_a_message_since_adds_nothing_and_says_why(backend, graph, user_id):
    from memory.chat_admin import delete_message_everywhere

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, first_part(whole, 2), context=context)
    first = (await messages_of(graph, before.chat_id))[0]
    await delete_message_everywhere(backend, graph, user_id, before.chat_id, first)

    grown = await import_chat(graph, backend.pool, user_id, whole, context=context)

    # The deleted message is not brought back, and nothing goes after it in a chat that changed.
    assert grown.already_imported and grown.not_added == "chat_changed" and grown.messages == 0
    assert "message 1 was deleted since it was imported" in grown.not_added_reason
    messages = await messages_of(graph, before.chat_id)
    assert len(messages) == 2 and "moving" not in messages[0].text


@pytest.mark.slow
async def test_a_grown_conversation_is_not_extended_while_a_reply_runs_on_its_chat_and_a_reply_waits_for_its_import(backend, graph, user_id):
    from storage import chat_imports, chat_runs

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, first_part(whole, 2), context=context)
    run = await chat_runs.start_run(backend.pool, before.chat_id, user_id, "turn", "a-worker")

    busy = await import_chat(graph, backend.pool, user_id, whole, context=context)  # told, not raised: an export's other conversations go on
    assert busy.already_imported and busy.not_added == "chat_busy" and "import the export again when it has ended" in busy.not_added_reason
    assert await chat_imports.of_threads(backend.pool, user_id, [before.chat_id]) == {}  # no import row was left
    assert len(await messages_of(graph, before.chat_id)) == 2

    await chat_runs.finish(backend.pool, run, "finished")
    grown = await import_chat(graph, backend.pool, user_id, whole, context=context)
    assert grown.held_before == 2 and len(await messages_of(graph, before.chat_id)) == 4


@pytest.mark.slow
async def test_a_grown_conversation_edited_where_it_came_from_adds_nothing_and_names_the_message(backend, graph, user_id):
    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, first_part(whole, 2), context=context)
    edited = whole.messages[1].model_copy(update={"text": "Congratulations! Lisbon is lovely in spring."})
    changed = whole.model_copy(update={"messages": [whole.messages[0], edited, *whole.messages[2:]]})

    grown = await import_chat(graph, backend.pool, user_id, changed, context=context)

    # Not "the chat changed here": the chat is as imported; its message 2 and the export's differ.
    assert grown.already_imported and grown.not_added == "message_differs" and "message 2 differs" in grown.not_added_reason
    assert len(await messages_of(graph, before.chat_id)) == 2


@pytest.mark.slow
async def test_a_conversation_whose_import_ended_on_an_unanswered_message_gets_that_exchange_whole_when_it_grew(backend, graph, user_id):
    from memory.import_job import message_id

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, first_part(whole, 3), context=context)  # its last question had no reply yet

    grown = await import_chat(graph, backend.pool, user_id, whole, context=context)

    assert grown.chat_id == before.chat_id and grown.not_added is None and (grown.held_before, grown.messages) == (3, 4)
    messages = await messages_of(graph, grown.chat_id)
    assert [m.text[:12] for m in messages] == ["I'm moving t", "Congratulati", "Thanks. My l", "Alfama is a "]
    assert [m.id for m in messages] == [message_id(grown.chat_id, i) for i in range(4)]  # the question replaced by itself, not doubled


def numbered_conversation(n: int, first: str) -> ChatImport:
    """Our own format with a ``source_id``: ``first``, then small talk, ``n`` messages."""
    texts = [first] + [f"Message {i}: the trail number {i} was muddy." if i % 2 == 0 else f"Tell me more about trail {i}." for i in range(1, n)]
    [chat] = parse_import({"title": "Trails", "source_id": "trails-1", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "text": t, "time": f"2024-01-01T00:{i:02d}:00Z"} for i, t in enumerate(texts)
    ]})
    return chat


@pytest.mark.slow
async def test_a_grown_conversations_import_that_stopped_leaves_its_chat_taking_messages_and_the_next_import_goes_on(backend, graph, user_id, monkeypatch):
    from memory.import_job import ImportStopped
    from storage import chat_imports, chat_runs

    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, numbered_conversation(2, "Hello there."), context=context)
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 0.001)

    async def leave() -> bool:
        return True

    with pytest.raises(ImportStopped) as stopped:
        await import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, stop_when=leave)
    assert stopped.value.chat_id == before.chat_id and "Import the same export again" in str(stopped.value)
    held = len(await messages_of(graph, before.chat_id))
    assert 2 <= held < 20 and held % 2 == 0  # what it held, and whole exchanges of the new ones
    # The chat was complete before: it is not left incomplete, and takes messages.
    assert await chat_imports.of_threads(backend.pool, user_id, [before.chat_id]) == {}
    run = await chat_runs.start_run(backend.pool, before.chat_id, user_id, "turn", "a-worker")
    await chat_runs.finish(backend.pool, run, "finished")

    newer = await import_chat(graph, backend.pool, user_id, numbered_conversation(24, "Hello there."), context=context)  # a newer export still
    assert newer.held_before == held and newer.messages == 24
    assert len(await messages_of(graph, before.chat_id)) == 24


@pytest.mark.slow
async def test_an_extension_whose_importer_died_is_taken_back_by_the_next_import_even_of_a_newer_export(backend, graph, user_id):
    from langchain_core.messages import HumanMessage

    from memory.import_job import message_id
    from storage import chat_imports, chat_runs
    from storage.checkpoint_rows import mark_thread

    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, numbered_conversation(2, "Hello there."), context=context)
    mark = await mark_thread(backend.pool, before.chat_id)
    await chat_imports.begin_extension(
        backend.pool, before.chat_id, user_id, total=20, imported=2, exchanges_done=1, head_checkpoint=mark.checkpoint_id,
        head_writes=mark.head_writes, digest="the-export-it-was", worker="a-killed-importer",
    )
    # It wrote half an exchange, then was killed: its heartbeat stops.
    half = HumanMessage("Message 2: the trail number 2 was muddy.", id=message_id(before.chat_id, 2))
    await graph.aupdate_state({"configurable": {"thread_id": before.chat_id}}, {"messages": [half]}, as_node="reply")
    async with backend.pool.connection() as conn:
        await conn.execute("UPDATE memory_agent_imports SET heartbeat_at = now() - interval '1 hour' WHERE thread_id = %s", (before.chat_id,))
    with pytest.raises(chat_imports.ImportInProgress, match="import the export again"):
        await chat_runs.start_run(backend.pool, before.chat_id, user_id, "turn", "a-worker")
    with pytest.raises(chat_imports.NotResumable, match="import the export again"):  # not resumed as if it were a first import
        await import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, resume=before.chat_id)

    newer = await import_chat(graph, backend.pool, user_id, numbered_conversation(6, "Hello there."), context=context)

    assert newer.chat_id == before.chat_id and newer.held_before == 2 and newer.messages == 6
    messages = await messages_of(graph, before.chat_id)
    assert [m.id for m in messages] == [message_id(before.chat_id, i) for i in range(6)]
    assert await chat_imports.of_threads(backend.pool, user_id, [before.chat_id]) == {}


@pytest.mark.slow
async def test_deleting_a_chat_while_its_grown_conversation_is_added_keeps_what_its_first_import_taught(backend, graph, user_id):
    from memory.chat_admin import delete_chat, stop_imports

    first = "I live in Reykjavik and I work as a pilot."
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, numbered_conversation(2, first), context=context)
    assert (await get_user_document(backend.store, user_id)).profile.role == "pilot"
    reached = asyncio.Event()

    def progress(n, total):
        if n >= 6:
            reached.set()
            return asyncio.sleep(0.25)

    extension = asyncio.create_task(import_chat(graph, backend.pool, user_id, numbered_conversation(40, first), context=context, on_progress=progress))
    await asyncio.wait_for(reached.wait(), 120)
    await stop_imports(backend.pool, user_id, before.chat_id)
    await delete_chat(backend, user_id, before.chat_id)
    await asyncio.gather(extension, return_exceptions=True)

    # As a plain deletion of the chat: what it taught before the extension stays.
    assert (await get_user_document(backend.store, user_id)).profile.role == "pilot"
    assert await thread_owners.threads_of(backend.pool, user_id) == []


@pytest.fixture
async def fenced_graph(backend):
    """The graph as the app and the CLI compile it: its saver fences a thread an importer stops on."""
    from storage.fenced_saver import FencedPostgresSaver

    return compile_graph(FencedPostgresSaver(backend.pool), backend.store)


@pytest.mark.slow
@pytest.mark.parametrize("grown", [False, True], ids=["resumed", "grown-conversation"])
async def test_an_importer_whose_import_another_took_over_stops_and_removes_nothing(backend, fenced_graph, user_id, grown, monkeypatch):
    from memory.import_job import ImportStopped
    from storage import chat_imports

    graph, context = fenced_graph, Context(user_id=user_id, model="offline")
    if grown:
        await import_chat(graph, backend.pool, user_id, numbered_conversation(2, "Hello there."), context=context)
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 60)  # this importer beats only when its exchanges say so
    taken: list = []

    async def silent_then_taken(n: int, total: int) -> None:
        # This importer went silent past STALE_AFTER_SECONDS (a blocked loop, a slow database), and
        # the user's next import of the conversation (a resume, or its newer export) took it over and completed.
        if n >= 6 and not taken:
            [(thread_id, row)] = (await chat_imports.of_threads(backend.pool, user_id, await thread_owners.threads_of(backend.pool, user_id))).items()
            async with backend.pool.connection() as conn:
                await conn.execute("UPDATE memory_agent_imports SET heartbeat_at = now() - interval '1 hour' WHERE import_id = %s", (row.import_id,))
            other = numbered_conversation(24, "Hello there.") if grown else numbered_conversation(20, "Hello there.")
            taken.append(await import_chat(graph, backend.pool, user_id, other, context=context, resume=None if grown else thread_id))

    with pytest.raises(ImportStopped, match="Another import of this conversation took chat"):
        await import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, on_progress=silent_then_taken)

    # Not taken for a cancellation: the chat is there, as the other import left it, with no import row.
    [other] = taken
    assert await thread_owners.threads_of(backend.pool, user_id) == [other.chat_id]
    assert len(await messages_of(graph, other.chat_id)) == (24 if grown else 20)
    # It wrote no exchange after it came back (the head is the other's: every turn counted).
    assert (await graph.aget_state({"configurable": {"thread_id": other.chat_id}})).values["user_turns"] == (12 if grown else 10)
    assert await chat_imports.of_threads(backend.pool, user_id, [other.chat_id]) == {}
    # Nor is the chat left fenced in this process: a newer export's messages are written, not dropped.
    newer = await import_chat(graph, backend.pool, user_id, numbered_conversation(28, "Hello there."), context=context)
    assert newer.messages == 28 and len(await messages_of(graph, other.chat_id)) == 28


@pytest.mark.slow
async def test_an_importer_interrupted_after_another_took_it_over_takes_nothing_of_the_others_back(backend, fenced_graph, user_id, monkeypatch):
    from langchain_core.messages import HumanMessage

    from memory.import_job import message_id
    from storage import chat_imports

    graph, context = fenced_graph, Context(user_id=user_id, model="offline")
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 60)
    importing = None

    async def taken_then_interrupted(n: int, total: int) -> None:
        if n >= 6 and not importing.cancelled():
            [(thread_id, row)] = (await chat_imports.of_threads(backend.pool, user_id, await thread_owners.threads_of(backend.pool, user_id))).items()
            async with backend.pool.connection() as conn:
                await conn.execute("UPDATE memory_agent_imports SET heartbeat_at = now() - interval '1 hour' WHERE import_id = %s", (row.import_id,))
            await chat_imports.take_over(backend.pool, thread_id, user_id, digest=row.digest, worker="another-importer")
            # The other import writes its next message; then this importer's caller is interrupted (Ctrl-C).
            theirs = HumanMessage("Message 6: the trail number 6 was muddy.", id=message_id(thread_id, 6))
            await graph.aupdate_state({"configurable": {"thread_id": thread_id}}, {"messages": [theirs]}, as_node="reply")
            importing.cancel()

    importing = asyncio.create_task(
        import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, on_progress=taken_then_interrupted)
    )
    with pytest.raises(asyncio.CancelledError):
        await importing

    [thread_id] = await thread_owners.threads_of(backend.pool, user_id)
    messages = await messages_of(graph, thread_id)
    assert messages[-1].id == message_id(thread_id, 6)  # the other import's write stays
    [row] = (await chat_imports.of_threads(backend.pool, user_id, [thread_id])).values()
    assert row.state == "running"  # the other's, untouched (not marked incomplete)


@pytest.mark.slow
async def test_an_exchange_done_again_is_not_a_second_mention_of_what_it_taught(backend, graph, user_id):
    from memory.import_job import message_id
    from memory.user_memory import list_facts
    from memory.writer.extraction import retract_taught_by

    first = "I live in Reykjavik and I have a dog named Bolt."
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, numbered_conversation(1, first), context=context)  # no reply yet
    taught = {f.text: f.mentions for f in await list_facts(backend.store, user_id)}
    assert taught and set(taught.values()) == {1}

    await import_chat(graph, backend.pool, user_id, numbered_conversation(4, first), context=context)  # its exchange done again, whole

    assert {f.text: f.mentions for f in await list_facts(backend.store, user_id) if f.text in taught} == taught
    # So an edit of that message still retracts what only it taught.
    retracted = await retract_taught_by(backend.store, user_id, [message_id(before.chat_id, 0)])
    assert sorted(retracted.facts) == sorted(taught)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["delete-chat", "forget-me"])
async def test_an_importer_taken_over_whose_chat_is_deleted_before_it_comes_back_removes_what_it_wrote(backend, fenced_graph, user_id, monkeypatch, how):
    from memory import chat_admin
    from memory.import_job import ImportCancelled
    from storage import chat_imports
    from tests.integration.test_import_safety import left_behind, user_rows

    graph, context = fenced_graph, Context(user_id=user_id, model="offline")
    monkeypatch.setattr(chat_imports, "BEAT_SECONDS", 60)
    seen: dict = {}

    async def stalled_taken_then_deleted(n: int, total: int) -> None:
        # This importer stalls; a resume completes the import; then the user deletes the chat (or is forgotten).
        if n >= 6 and not seen:
            [(thread_id, row)] = (await chat_imports.of_threads(backend.pool, user_id, await thread_owners.threads_of(backend.pool, user_id))).items()
            async with backend.pool.connection() as conn:
                await conn.execute("UPDATE memory_agent_imports SET heartbeat_at = now() - interval '1 hour' WHERE import_id = %s", (row.import_id,))
            await import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, resume=thread_id)
            seen["thread"] = thread_id
            if how == "delete-chat":
                await chat_admin.stop_imports(backend.pool, user_id, thread_id)
                await chat_admin.delete_chat(backend, user_id, thread_id)
            else:
                await chat_admin.forget_user_everywhere(backend, user_id)

    with pytest.raises(ImportCancelled):  # its chat is gone: a cancellation, not a take-over
        await import_chat(graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, on_progress=stalled_taken_then_deleted)

    # Nothing it wrote after it came back survives: no checkpoint, owner row or index row brings the chat back.
    assert set((await left_behind(backend.pool, user_id, seen["thread"])).values()) == {0}
    assert set((await user_rows(backend, user_id)).values()) == {0}
    assert await thread_owners.threads_of(backend.pool, user_id) == []


@pytest.mark.slow
async def test_the_same_export_again_after_a_message_of_its_chat_was_deleted_adds_nothing_and_gives_no_reason(backend, graph, user_id):
    from memory.chat_admin import delete_message_everywhere

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    before = await import_chat(graph, backend.pool, user_id, whole, context=context)
    await delete_message_everywhere(backend, graph, user_id, before.chat_id, (await messages_of(graph, before.chat_id))[0])

    again = await import_chat(graph, backend.pool, user_id, whole, context=context)  # nothing in it the chat lacks

    assert again.already_imported and again.not_added is None and again.not_added_reason is None


@pytest.mark.slow
@pytest.mark.parametrize("same_export", [True, False])
async def test_a_conversation_imported_while_its_first_import_has_no_exchange_yet_adds_nothing_and_gives_no_false_reason(
    backend, graph, user_id, same_export
):
    """No false reason (the chat has no message yet: it said a message differs). From the same export
    there is nothing to tell, its messages are on the way; from another, that import runs now."""
    from memory.chat_import import prepare_import
    from storage import chat_imports

    [whole] = parse_import([export("chatgpt_conversations.json")[2]])
    context = Context(user_id=user_id, model="offline")
    digest = prepare_import(whole, context.max_message_chars) if same_export else "another export's"
    # Another importer has just begun the conversation: its row and the source's claim, no checkpoint yet.
    await chat_imports.begin(backend.pool, f"t-{user_id}", user_id, total=len(whole.messages), digest=digest, worker="another:1", source_id=whole.source_id)

    again = await import_chat(graph, backend.pool, user_id, whole, context=context)

    assert again.already_imported and again.chat_id == f"t-{user_id}"
    assert again.not_added == (None if same_export else "import_in_progress"), again


@pytest.mark.slow
async def test_an_importer_whose_client_left_just_as_another_took_it_over_says_so_and_keeps_nothing_back(backend, fenced_graph, user_id):
    from memory.import_job import ImportStopped
    from storage import chat_imports

    graph, context = fenced_graph, Context(user_id=user_id, model="offline")
    stalled, taken = asyncio.Event(), []

    async def stall(n: int, total: int) -> None:
        if n >= 2:  # its exchanges stall here (and beat no more), until they are cancelled
            stalled.set()
            await asyncio.Event().wait()

    async def left_as_taken_over() -> bool:
        # Between this importer's beat and its look at the client: a resume takes the row, and the client leaves.
        if not stalled.is_set():
            return False
        [(thread_id, row)] = (await chat_imports.of_threads(backend.pool, user_id, await thread_owners.threads_of(backend.pool, user_id))).items()
        async with backend.pool.connection() as conn:
            await conn.execute("UPDATE memory_agent_imports SET heartbeat_at = now() - interval '1 hour' WHERE import_id = %s", (row.import_id,))
        await chat_imports.take_over(backend.pool, thread_id, user_id, digest=row.digest, worker="another-importer")
        taken.append(thread_id)
        return True

    with pytest.raises(ImportStopped, match="Another import of this conversation took chat"):  # not "marked incomplete: resume it"
        await import_chat(
            graph, backend.pool, user_id, numbered_conversation(20, "Hello there."), context=context, on_progress=stall, stop_when=left_as_taken_over
        )

    [row] = (await chat_imports.of_threads(backend.pool, user_id, taken)).values()
    assert row.state == "running"  # the other's, not marked incomplete by this one
