"""A forget reaches a word however it was written and wherever it stands (real Postgres, the real
graph with the offline model): inside an e-mail address or a link, with a possessive, with or
without its accents; in every chat title, the ones the user set or an import brought included;
past any number of rows; and the log says what a forget reached, never what it forgot."""

from __future__ import annotations

import logging
import random
import uuid

import pytest
from langgraph.store.base import PutOp

from core.context import Context
from core.namespaces import facts_ns
from core.redaction import Redactor, term_hash
from core.schemas import Fact
from core.words import plain_word
from graph.assembly import compile_graph
from memory.chat_import import ChatImport
from memory.forgetting import forget_request
from memory.import_job import import_chat
from memory.user_memory import get_chat, list_chats, list_facts
from memory.writer.records import rename_chat
from storage import episode_rewrites
from storage.episodes import TABLE
from storage.user_transaction import user_transaction
from tests.support.graph_turns import new_thread, stream_turn

pytestmark = pytest.mark.slow


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


async def say(graph, user: str, thread: dict, *lines: str) -> None:
    for line in lines:
        await stream_turn(graph, line, thread, Context(user_id=user, model="offline"))


async def indexed(backend, user: str) -> list[str]:
    async with backend.pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT content FROM {TABLE} WHERE owner = %s ORDER BY position", (user,))).fetchall()
    return [r["content"] for r in rows]


async def history(backend, graph, user: str, lines: list[str], title: str | None = None):
    chat = ChatImport.model_validate(
        {"title": title, "messages": [{"role": "user", "text": t, "time": f"2026-01-0{i + 1}T10:00:00Z"} for i, t in enumerate(lines)]}
    )
    return await import_chat(graph, backend.pool, user, chat, context=Context(user_id=user, model="offline"))


def test_a_word_is_matched_without_its_possessive_or_its_accents_but_other_scripts_keep_their_marks():
    assert plain_word("zelda's") == "zelda" and plain_word("james'") == "james"
    assert plain_word("zürich") == "zurich" and plain_word("malmö") == "malmo"
    assert plain_word("がき") == "がき"  # a voiced kana is another word, not an accented one
    redactor = Redactor("u", frozenset({term_hash("u", "zelda"), term_hash("u", "zurich")}))
    assert redactor.carries("Zelda's phone number is 555-0199") and redactor.carries("My dentist is in Zürich")
    # A forget recorded before the plain stems (the stem of "Zelda's" was "zelda'") still matches.
    older = Redactor("u", frozenset({term_hash("u", "zelda'")}))
    assert older.carries("Zelda's birthday is in June")


async def test_the_rows_pattern_finds_a_word_inside_an_address_or_a_link_accented_or_not(backend):
    pattern = episode_rewrites.word_pattern(["quixotic", "Zurich", "studies"])
    texts = ["mail bob.hansen@quixotic-labs.com", "see www.quixotic-labs.com", "in Zürich", "in ZURICH", "a study", "my_quixotic_notes"]
    async with backend.pool.connection() as conn:
        found = [(await (await conn.execute("SELECT %s ~* %s AS hit", (t, pattern))).fetchone())["hit"] for t in texts + ["unrelated"]]
    assert found == [True] * len(texts) + [False]
    assert episode_rewrites.word_pattern([]) == ""
    # A word too short to narrow the rows is looked for by the index's words alone ("Li" matched nearly every row).
    assert episode_rewrites.word_pattern(["Li", "Xi"]) == ""
    # "ss" is "ß" too ("strasse" is how "Straße" reads casefolded); a long message's hundreds of words are not all patterned.
    async with backend.pool.connection() as conn:
        hit = await (await conn.execute("SELECT %s ~* %s AS hit", ("in der Hauptstraße 5", episode_rewrites.word_pattern(["hauptstrasse"])))).fetchone()
    assert hit["hit"]
    many = episode_rewrites.word_pattern([f"word{i}x" for i in range(300)])
    assert many.count("|") == episode_rewrites.PATTERN_WORDS  # (the start anchor's one, and one between each two words)


async def test_a_word_inside_an_email_address_or_a_link_is_forgotten_in_every_row(backend, graph):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    await say(graph, user, new_thread(), "My work email is bob.hansen@quixotic-labs.com", "Our website is www.quixotic-labs.com",
              "I play the cello")
    assert sum("quixotic" in t for t in await indexed(backend, user)) >= 2
    report = await forget_request(backend.store, user, "quixotic")
    assert report is not None and report.messages >= 2  # "Nothing remembered matches" before
    rows = await indexed(backend, user)
    assert not [t for t in rows if "quixotic" in t.casefold()]
    assert any("cello" in t for t in rows)


async def test_a_word_said_with_accents_is_forgotten_by_its_plain_spelling_and_the_reverse(backend, graph):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    await say(graph, user, new_thread(), "My dentist Dr. Kowalczyk is in Zürich", "I bought a cafe racer in Malmo")
    assert await forget_request(backend.store, user, "Zurich") is not None
    assert await forget_request(backend.store, user, "Malmö") is not None
    rows = " ".join(await indexed(backend, user)).casefold()
    assert "zürich" not in rows and "malmo" not in rows


async def test_a_possessive_is_forgotten_with_its_word_in_the_rows_and_the_title(backend, graph):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    thread = new_thread()
    await say(graph, user, thread, "Zelda's phone number is 555-0199", "I play the cello")
    assert any("Zelda" in c.title for c in await list_chats(backend.store, user))
    assert await forget_request(backend.store, user, "Zelda") is not None
    assert not [t for t in await indexed(backend, user) if "zelda" in t.casefold()]
    assert not [c.title for c in await list_chats(backend.store, user) if "zelda" in c.title.casefold()]


async def test_a_forget_reaches_a_title_the_user_set_or_an_import_brought_and_no_import_or_rename_brings_it_back(backend, graph):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    lines = ["We are moving to Lisbon in spring", "Teodoro found a flat near the river"]
    done = await history(backend, graph, user, lines, title="Moving to Lisbon with Teodoro")
    chat = await get_chat(backend.store, user, done.chat_id)
    assert chat.title == "Moving to Lisbon with Teodoro" and chat.title_by_user
    assert await forget_request(backend.store, user, "Teodoro") is not None  # the title was the last copy that named him
    chat = await get_chat(backend.store, user, done.chat_id)
    assert "Teodoro" not in chat.title and "Teodoro" not in chat.summary_text
    assert chat.title == "Chat of 1 January 2026" and not chat.title_by_user  # its one clause named him: the agent may title it again
    # The same export imported again as a new chat: its title comes without the forgotten word.
    again = await history(backend, graph, user, lines, title="Teodoro")
    renewed = await get_chat(backend.store, user, again.chat_id)
    assert "Teodoro" not in renewed.title and not renewed.title_by_user  # nothing of it left: titled by date, the agent may title it
    # A rename that says it again is stored without it.
    renamed = await rename_chat(backend.store, user, chat, "Flat hunting with Teodoro")
    assert "Teodoro" not in renamed.title and "Teodoro" not in (await get_chat(backend.store, user, done.chat_id)).title
    kept = await rename_chat(backend.store, user, chat, "Flat hunting, with Teodoro")
    assert kept.title == "Flat hunting" and kept.title_by_user  # what the rename said besides stays the user's title


async def test_every_row_that_carries_the_word_is_read_page_after_page(backend, graph):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    await say(graph, user, new_thread(), "I keep bees", "The bees swarmed", "My bees like lavender", "I play the cello")
    pages = [len(p) async for p in episode_rewrites.pages_with_words(backend.pool, user, ["bees"], page=1)]
    assert len(pages) >= 3 and set(pages) == {1}  # the three messages and the replies that quote them, one a page
    assert await forget_request(backend.store, user, "bees") is not None
    assert not [t for t in await indexed(backend, user) if "bee" in t.casefold()]


async def test_the_log_says_what_a_forget_reached_never_what_it_forgot(backend, graph, caplog):
    user = f"spell-{uuid.uuid4().hex[:8]}"
    await say(graph, user, new_thread(), "My passport number is X9911223")
    with caplog.at_level(logging.DEBUG, logger="memory"):
        assert await forget_request(backend.store, user, "my passport number") is not None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "forget for" in logged
    assert "X9911223" not in logged and "passport" not in logged.casefold()


async def test_a_forget_of_what_a_turn_being_answered_says_is_recorded_and_the_turn_learns_nothing_of_it(backend):
    """"I live in Porto now" was being answered when the user asked to forget Porto: the forget
    found it in no index yet, answered "nothing remembered", and the turn then stored it."""
    from core.schemas import ExtractionResult, NewFact, ProfileUpdates
    from memory.user_memory import get_user_document, list_facts
    from memory.writer.extraction import apply_extraction
    from storage import chat_runs

    user, thread_id = f"spell-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    said = "I live in Porto now and I work as a baker"
    run_id = await chat_runs.start_run(backend.pool, thread_id, user, "message", "test")
    await chat_runs.record_head(backend.pool, run_id, None, [], chat_runs.RecordedTurn(message_id="m1", text=said))
    assert await forget_request(backend.store, user, "Porto") is not None
    # The turn's memory update, after the forget: what carries the word is not learned.
    await apply_extraction(backend.store, user, ExtractionResult(profile_updates=ProfileUpdates(location="Porto", role="baker"),
                                                                 new_facts=[NewFact(text="Lives in Porto")]), message_id="m1")
    doc = await get_user_document(backend.store, user)
    assert doc.profile.location is None and doc.profile.role == "baker"
    assert [f.text for f in await list_facts(backend.store, user)] == []
    await chat_runs.finish(backend.pool, run_id, "finished")
    assert await chat_runs.active_turn_texts(backend.pool, user) == []  # an ended run's text is cleared


async def test_every_fact_of_a_user_with_hundreds_is_listed_once_and_a_forget_reaches_each_that_carries_the_word(backend, user_id):
    """The store lists a namespace newest change first; read a page at a time (LIMIT/OFFSET), the
    items one transaction wrote (one updated_at) fell across pages in another order each time: some
    were listed twice, others never, and a forget left facts that carried its word."""
    rnd = random.Random(3)
    facts = [Fact(id=str(uuid.uuid4()), text=f"Keeps bees in hive {i}" if i % 3 == 0 else f"Likes item {i}") for i in range(900)]
    for start in range(0, len(facts), 7):  # a turn's extraction writes a few facts in one transaction
        async with user_transaction(backend.store, user_id) as tx:
            await tx.abatch([PutOp(facts_ns(user_id), f.id, f.model_dump(mode="json"), index=False) for f in facts[start:start + 7]])
    async with user_transaction(backend.store, user_id) as tx:  # some mentioned again since
        await tx.abatch([PutOp(facts_ns(user_id), f.id, f.model_dump(mode="json"), index=False) for f in rnd.sample(facts, 30)])

    listed = [f.id for f in await list_facts(backend.store, user_id)]
    assert sorted(listed) == sorted(f.id for f in facts)
    assert await forget_request(backend.store, user_id, "bees") is not None
    async with backend.pool.connection() as conn:  # every row, not through the readers
        rows = await (await conn.execute("SELECT value->>'text' AS text FROM store WHERE prefix = %s", (".".join(facts_ns(user_id)),))).fetchall()
    assert len(rows) == 600 and not [r["text"] for r in rows if "bees" in r["text"]]
