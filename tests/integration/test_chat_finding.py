"""Titles from the first exchange, search before any fold, and switching chats in the CLI (real Postgres)."""

from __future__ import annotations

import io
import re
import uuid

import pytest
from langchain_core.messages import HumanMessage

from app.cli.chat_session import ChatSession
from core.context import Context
from core.schemas import ChatRecord
from graph.assembly import compile_graph
from llm.chat_model import register_model, unregister_model
from memory.chat_search import find_chat
from memory.writer.records import create_chat_record as put_chat
from storage import thread_owners
from memory.user_memory import get_chat
from tests.support.scripted_model import ScriptedChatModel, empty_extraction

BANK = "Hi! I'm Maya, I'm a backend developer and my bank charged me twice for the same card payment"


async def turn(backend, user_id: str, thread_id: str, text: str, model: str = "offline") -> None:
    graph = compile_graph(backend.checkpointer, backend.store)
    await graph.ainvoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread_id}}, context=Context(user_id=user_id, model=model))


def scripted(title_reply):
    def responder(kind, messages):
        if kind == "extract":
            return empty_extraction()
        if kind == "title":
            return title_reply
        if kind == "fold":
            return {"summary": "s"}
        return "Let us look at that charge."

    return ScriptedChatModel(responder=responder)


@pytest.fixture
def model_named():
    names = []

    def register(model) -> str:
        names.append(f"scripted-{uuid.uuid4().hex[:6]}")
        register_model(names[-1], model)
        return names[-1]

    yield register
    for name in names:
        unregister_model(name)


# --------------------------------------------------------------------------- titles


@pytest.mark.slow
async def test_offline_a_new_chat_gets_a_keyword_title_after_its_first_reply_not_its_greeting(backend, user_id):
    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, BANK)
    chat = await get_chat(backend.store, user_id, thread)
    assert chat.title == "My bank charged me twice"
    assert chat.summary_text.startswith("My bank charged me twice\nOpening: Hi! I'm Maya")


@pytest.mark.slow
async def test_with_a_model_the_title_comes_from_the_first_exchange(backend, user_id, model_named):
    model = scripted({"title": "Card charged twice"})
    name = model_named(model)
    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, BANK, model=name)

    assert (await get_chat(backend.store, user_id, thread)).title == "Card charged twice"
    [(_, title_call)] = [c for c in model.calls if c[0] == "title"]
    body = title_call[-1].text
    assert "[user] " + BANK in body and "[assistant] Let us look at that charge." in body
    # Titled once: the second turn asks no title again (no summary yet).
    await turn(backend, user_id, thread, "Should I dispute it?", model=name)
    assert len([c for c in model.calls if c[0] == "title"]) == 1


@pytest.mark.slow
async def test_when_the_model_cannot_title_the_keyword_title_is_used(backend, user_id, model_named):
    name = model_named(scripted("this is not a title object"))
    thread = str(uuid.uuid4())
    await turn(backend, user_id, thread, BANK, model=name)
    assert (await get_chat(backend.store, user_id, thread)).title == "My bank charged me twice"


async def test_a_title_the_user_set_is_kept(backend, user_id, model_named):
    name = model_named(scripted({"title": "Card charged twice"}))
    thread = str(uuid.uuid4())
    await thread_owners.create(backend.pool, thread, user_id)
    await put_chat(backend.store, user_id, ChatRecord(thread_id=thread, title="Maya's refund", title_by_user=True))
    await turn(backend, user_id, thread, BANK, model=name)
    assert (await get_chat(backend.store, user_id, thread)).title == "Maya's refund"


# --------------------------------------------------------------------------- search before any fold


@pytest.mark.slow
async def test_a_chat_is_found_by_its_title_opening_or_latest_message_before_any_fold(backend, user_id):
    bank, trip = str(uuid.uuid4()), str(uuid.uuid4())
    for text in (BANK, "They say the refund takes five working days", "Should I file a dispute with the card issuer?"):
        await turn(backend, user_id, bank, text)
    for text in ("I'm planning a trip to Crete in June", "Which beaches near Chania are worth a day?"):
        await turn(backend, user_id, trip, text)
    assert (await get_chat(backend.store, user_id, bank)).message_count == 6  # nothing folded: all messages raw

    for query in ("the bank", "Maya the backend developer", "disputing a card payment", "waiting for my refund"):
        found = await find_chat(backend.store, user_id, query)
        assert found.candidates and found.candidates[0].chat.thread_id == bank, query
    assert (await find_chat(backend.store, user_id, "beach holiday in Greece")).candidates[0].chat.thread_id == trip


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
async def four_chats(backend, user_id):
    out, err = io.StringIO(), io.StringIO()
    session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides={"model": "offline"})
    threads = {}
    for key, lines in {
        "bank": [BANK, "They say the refund takes five working days"],
        "lisbon": ["We're moving to Lisbon in the autumn", "Is Alfama a good area to rent a flat?"],
        "crete": ["I'm planning a trip to Crete in June", "Which beaches near Chania are worth a day?"],
        "bread": ["How do I make sourdough bread at home?"],
    }.items():
        await session.command("/new")
        threads[key] = session.thread_id
        for line in lines:
            await session.send(line)
    return session, threads, err


@pytest.mark.slow
async def test_chats_are_listed_numbered_newest_first_and_opened_by_number(four_chats):
    session, threads, err = four_chats
    await session.command("/chats")
    listing = err.getvalue()
    assert " 1. * Make sourdough bread at home  (2 messages, just now)" in listing  # the current chat is starred
    assert " 2.   I'm planning a trip to Crete  (4 messages" in listing and " 4.   My bank charged me twice  (4 messages" in listing

    await session.command("/open 4")
    assert session.thread_id == threads["bank"]
    assert "Switched to 'My bank charged me twice'" in err.getvalue()
    assert "you> They say the refund takes five working days" in err.getvalue()  # where the chat left off
    assert re.search(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] you> They say", err.getvalue())  # with when it was said
    await session.command("/open 9")
    assert "No chat 9: /chats numbers them 1 to 4." in err.getvalue() and session.thread_id == threads["bank"]


@pytest.mark.slow
async def test_a_superscript_digit_or_a_huge_number_is_no_chat_number_and_does_not_end_the_chat(four_chats):
    """`/open ²` (and "²" as the answer to "Which one?") ended the chat with a ValueError traceback:
    str.isdigit() holds for '²', which int() does not take; so did a number of 5,000 digits. Decimal
    digits of any script still number the chats."""
    session, threads, err = four_chats
    await session.command("/open ²")
    assert "No chat seems to be about '²'." in err.getvalue() and session.thread_id == threads["bread"]
    await session.command("/open " + "9" * 5000)  # past int()'s 4,300 digits
    assert "No chat 99999999999999999999…: /chats numbers them 1 to 4." in err.getvalue()
    await session.command("/open ٤")  # Arabic-Indic 4
    assert session.thread_id == threads["bank"]
    session.offered = [ChatRecord(thread_id=threads["lisbon"], title="Lisbon"), ChatRecord(thread_id=threads["crete"], title="Crete")]
    assert await session.send("²") is not None  # not an answer to the offer: an ordinary message
    assert session.offered == [] and session.thread_id == threads["bank"]


@pytest.mark.slow
async def test_open_with_words_switches_to_the_chat_they_describe(four_chats):
    session, threads, err = four_chats
    await session.command("/open the one about beaches in Greece")
    assert session.thread_id == threads["crete"]
    await session.command("/open")
    assert "Usage: /open N" in err.getvalue()


@pytest.mark.slow
async def test_asking_in_words_offers_the_one_clear_match_and_switches_only_after_yes(four_chats, backend):
    session, threads, err = four_chats
    before = len((await session.graph.aget_state(session.config)).values["messages"])

    assert await session.send("go back to the chat about the bank") is None
    assert "Switch to 'My bank charged me twice' (4 messages" in err.getvalue()
    assert session.thread_id == threads["bread"]  # nothing yet
    assert len((await session.graph.aget_state(session.config)).values["messages"]) == before  # not sent to the model

    await session.send("yes")
    assert session.thread_id == threads["bank"]


@pytest.mark.slow
async def test_a_no_stays_and_an_unknown_topic_is_said_so(four_chats):
    session, threads, err = four_chats
    await session.send("go back to the chat about the bank")
    await session.send("no")
    assert "Staying in this chat." in err.getvalue() and session.thread_id == threads["bread"]
    await session.send("go back to the chat about quantum chromodynamics")
    assert "No earlier chat seems to be about 'quantum chromodynamics'" in err.getvalue()


@pytest.mark.slow
async def test_several_matches_are_listed_and_a_number_picks_one(four_chats):
    session, threads, err = four_chats
    await session.command("/new")  # from a fresh chat, so every earlier one may be offered
    await session.send("go back to the chat about Portugal or Greece")
    listing = err.getvalue().split("Chats that may be about 'Portugal or Greece':")[-1]
    assert "Which one? (a number, or no)" in listing
    lines = [line for line in listing.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert {"Crete", "Lisbon"} <= {w for line in lines for w in ("Crete", "Lisbon") if w in line}
    pick = next(i for i, line in enumerate(lines, start=1) if "Crete" in line)
    await session.send(str(pick))
    assert session.thread_id == threads["crete"]


@pytest.mark.slow
async def test_any_other_answer_to_an_offer_is_an_ordinary_message(four_chats):
    session, threads, err = four_chats
    await session.send("go back to the chat about the bank")
    reply = await session.send("what can I bake with rye flour?")
    assert reply and session.thread_id == threads["bread"]
    assert session.offered == []
