"""The episodic index: every message indexed after the reply with its time, recalled into the
prompt behind a relevance gate, kept in step with edits, deleted with the chat and the user,
rebuilt by reindex, searched by message time, and scoped by owner (also on a partitioned table)."""

from __future__ import annotations

import random
import uuid
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import AsyncIterator

import pytest
from psycopg import sql
from langchain_core.messages import AIMessage, HumanMessage

from core.context import Context
from core.messages import sent_at, stamp_sent_at
from graph.assembly import compile_graph
from memory import episodes, queries
from memory.chat_admin import delete_chat, forget_user_everywhere
from storage import forget_ledger, thread_owners
from prompts.reply_prompt import EPISODES_HEADER, parse_sections
from storage import episodes as episode_table
from storage.partitions import leaf_of
from storage.postgres import open_pool, prepare_database
from tests.support.graph_turns import new_thread, stream_turn
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model

WEDDING = "My sister Noa is getting married in Haifa on the 14th of June."


@pytest.fixture
def graph(backend):
    return compile_graph(backend.checkpointer, backend.store)


@asynccontextmanager
async def pool_on_new_database(url: str) -> AsyncIterator:
    """A pool on a database of its own (``new_database``), with nothing of ours set up in it."""
    await prepare_database(url)
    pool = await open_pool(url, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


async def rows_of(pool, user: str) -> list[dict]:
    async with pool.connection() as conn:
        return await (
            await conn.execute(
                f"SELECT thread_id, message_id, position, role, sent_at, content FROM {episode_table.TABLE} "
                "WHERE owner = %s ORDER BY thread_id, position",
                (user,),
            )
        ).fetchall()


@pytest.fixture
def scripted():
    with registered_scripted_model(
        plain_answers(extract=lambda _text: empty_extraction(), title="A chat", summary="Talked.", reply="Noted.")
    ) as (name, model):
        yield name, model


def excerpts_section(model) -> str:
    return parse_sections(model.calls_of("reply")[-1]).get(EPISODES_HEADER, "")


async def say(graph, user: str, text: str, model: str, config: dict | None = None):
    config = config or new_thread()
    turn = await stream_turn(graph, text, config, Context(user_id=user, model=model))
    return config, turn


@pytest.mark.slow
async def test_every_message_of_a_turn_is_indexed_after_the_reply_with_its_time(graph, backend, user_id, scripted):
    before = datetime.now(timezone.utc)
    _, turn = await say(graph, user_id, "I adopted a beagle called Biscuit in March", scripted[0])
    human, reply = turn.values["messages"][0], turn.values["messages"][-1]
    assert sent_at(human) >= before and sent_at(reply) >= sent_at(human)
    rows = await rows_of(backend.pool, user_id)
    assert [(r["role"], r["message_id"]) for r in rows] == [("user", human.id), ("assistant", reply.id)]
    assert rows[0]["content"] == "I adopted a beagle called Biscuit in March"
    assert rows[0]["sent_at"] == sent_at(human)


@pytest.mark.slow
async def test_what_was_said_in_another_chat_reaches_the_prompt_dated_and_named_by_its_chat(graph, user_id, scripted):
    name, model = scripted
    await say(graph, user_id, WEDDING, name)
    await say(graph, user_id, "When is Noa's wedding, and where?", name)
    section = excerpts_section(model)
    assert WEDDING in section and '"A chat"' in section
    today = datetime.now(timezone.utc)
    assert f"{today.day} {today:%B %Y}" in section  # dated as people write dates


@pytest.mark.slow
async def test_an_unrelated_message_gets_no_excerpts(graph, user_id, scripted):
    name, model = scripted
    await say(graph, user_id, WEDDING, name)
    await say(graph, user_id, "What is the capital of Australia?", name)
    assert excerpts_section(model) == ""


async def test_what_the_model_already_sees_in_this_chat_is_not_excerpted(graph, user_id, scripted):
    name, model = scripted
    config, _ = await say(graph, user_id, WEDDING, name)
    await say(graph, user_id, "Remind me, where is Noa's wedding?", name, config)
    assert excerpts_section(model) == ""  # the first message is in the recent conversation already


@pytest.mark.slow
async def test_an_edit_drops_the_abandoned_branch_from_the_index(graph, backend, user_id, scripted):
    from app.http.routes_chats import checkpoint_before

    name, _ = scripted
    config, _ = await say(graph, user_id, "I live in Rome", name)
    _, turn = await say(graph, user_id, "My dog is called Rex", name, config)
    rex = turn.values["messages"][2]
    fork = await checkpoint_before(graph, config["configurable"]["thread_id"], rex.id)
    async for _ in graph.astream({"messages": [HumanMessage("My dog is called Max")]}, fork, context=Context(user_id=user_id, model=name)):
        pass
    texts = [r["content"] for r in await rows_of(backend.pool, user_id)]
    assert texts == ["I live in Rome", "Noted.", "My dog is called Max", "Noted."]
    found = await queries.search_conversation_history(backend.store, backend.checkpointer, user_id, "Rex")
    assert found.messages == []


async def test_messages_added_as_if_by_reply_are_indexed_with_their_own_times_or_the_checkpoints(graph, backend, user_id, scripted):
    """The import path: update_state(as_node="reply"), then the graph continues to its memory steps."""
    name, _ = scripted
    config = new_thread()
    said = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    human = stamp_sent_at(HumanMessage("We went camping at Lake Tahoe", id=str(uuid.uuid4())), said)
    answer = stamp_sent_at(AIMessage("That sounds lovely", id=str(uuid.uuid4())), said + timedelta(minutes=1))
    untimed = AIMessage("And the weather held up", id=str(uuid.uuid4()))
    before = datetime.now(timezone.utc)
    await graph.aupdate_state(config, {"messages": [human, answer, untimed]}, as_node="reply")
    await graph.ainvoke(None, config, context=Context(user_id=user_id, model=name))
    rows = await rows_of(backend.pool, user_id)
    assert [r["sent_at"] for r in rows[:2]] == [said, said + timedelta(minutes=1)]
    assert before - timedelta(seconds=1) <= rows[2]["sent_at"] <= datetime.now(timezone.utc)  # the checkpoint's time


@pytest.mark.slow
async def test_the_time_range_filters_messages_by_when_they_were_said(graph, backend, user_id, scripted):
    name, _ = scripted
    config = new_thread()
    old = stamp_sent_at(HumanMessage("I bought a red kayak", id=str(uuid.uuid4())), datetime(2023, 5, 8, tzinfo=timezone.utc))
    await graph.aupdate_state(config, {"messages": [old, AIMessage("Nice kayak!", id=str(uuid.uuid4()))]}, as_node="reply")
    await graph.ainvoke(None, config, context=Context(user_id=user_id, model=name))
    await say(graph, user_id, "I sold the kayak today", name, config)  # the same chat, active now

    may = await queries.search_conversation_history(backend.store, None, user_id, "kayak", "2023-05-01..2023-05-31")
    assert [m.snippet for m in may.messages] == ["I bought a red kayak"]
    assert may.messages[0].sent_at == datetime(2023, 5, 8, tzinfo=timezone.utc)
    week = await queries.search_conversation_history(backend.store, None, user_id, "kayak", "7d")
    assert "I sold the kayak today" in [m.snippet for m in week.messages]
    assert "I bought a red kayak" not in [m.snippet for m in week.messages]


@pytest.mark.slow
async def test_deleting_a_chat_and_forgetting_the_user_remove_their_messages(graph, backend, user_id, scripted):
    name, _ = scripted
    first, _ = await say(graph, user_id, "I play the cello", name)
    await say(graph, user_id, "I grow tomatoes", name)
    await delete_chat(backend, user_id, first["configurable"]["thread_id"])
    assert [r["content"] for r in await rows_of(backend.pool, user_id)] == ["I grow tomatoes", "Noted."]
    counts = await forget_user_everywhere(backend, user_id)
    assert counts["messages"] == 2 and await rows_of(backend.pool, user_id) == []


@pytest.mark.slow
async def test_another_users_thread_is_never_indexed_or_found_under_the_intruder(graph, backend, scripted):
    name, _ = scripted
    alice, mallory = f"a{uuid.uuid4().hex[:8]}", f"m{uuid.uuid4().hex[:8]}"
    config, _ = await say(graph, alice, "The vault code is Nightingale", name)
    await say(graph, mallory, "Tell me the vault code", name, config)  # alice's thread: the claim refuses mallory
    assert await rows_of(backend.pool, mallory) == []
    assert (await queries.search_conversation_history(backend.store, None, mallory, "vault Nightingale")).messages == []
    excerpts = await episodes.recall(backend.pool, backend.store.embeddings, mallory, "What is the vault code? Nightingale")
    assert excerpts == []


@pytest.mark.slow
async def test_reindex_rebuilds_the_index_from_the_checkpoints_with_the_same_times(graph, backend, user_id, scripted, minilm):
    from memory.reindex import reindex_episodes

    name, _ = scripted
    await say(graph, user_id, "I run the Tel Aviv marathon every February", name)
    before = await rows_of(backend.pool, user_id)
    await episode_table.delete_owner(backend.pool, user_id)
    counts = await reindex_episodes(backend.pool, minilm)
    assert counts["messages"] >= 2
    assert await rows_of(backend.pool, user_id) == before


@pytest.mark.slow
async def test_the_index_runs_unchanged_on_a_table_hash_partitioned_by_owner(new_database, minilm):
    """docs/scaling.md: the same code writes, searches, retracts and forgets on a partitioned table."""
    async with pool_on_new_database(new_database("episodes_partitioned")) as pool:
        async with pool.connection() as conn:
            for statement in episode_table.create_statements(minilm.dims, partitions=4):
                await conn.execute(statement)
        await episode_table.setup(pool, minilm.dims)  # the backend's set-up accepts the partitioned table
        await forget_ledger.setup(pool)  # index writes read what the owner had forgotten
        async with pool.connection() as conn:  # and who owns each thread
            for statement in thread_owners.CREATE:
                await conn.execute(statement)
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) AS n FROM pg_inherits WHERE inhparent = %s::regclass", (episode_table.TABLE,))).fetchone()
        assert row["n"] == 4
        emb = minilm.embeddings
        said = datetime(2024, 1, 2, tzinfo=timezone.utc)
        messages = {}
        for user in ("ann", "ben"):
            messages[user] = [
                stamp_sent_at(HumanMessage(f"{user} keeps bees on the roof", id=f"{user}-1"), said),
                stamp_sent_at(AIMessage("How many hives?", id=f"{user}-2"), said),
                stamp_sent_at(HumanMessage("Three hives", id=f"{user}-3"), said),
            ]
            await episodes.index_thread(pool, emb, user, f"t-{user}", messages[user])
        found = [f.candidate for f in await episodes.fused_search(pool, emb, "ann", "bees on the roof", gate=episodes.SEARCH_GATE)]
        assert {c.message_id for c in found} <= {"ann-1", "ann-2", "ann-3"} and found[0].message_id == "ann-1"
        excerpts = await episodes.recall(pool, emb, "ann", "How many beehives do I keep?")
        assert [l["text"] for e in excerpts for l in e["lines"]][-2:] == ["How many hives?", "Three hives"]
        await episodes.index_thread(pool, emb, "ann", "t-ann", messages["ann"][:1])  # an edit took the rest back
        assert [r["message_id"] for r in await rows_of(pool, "ann")] == ["ann-1"]
        await episode_table.delete_owner(pool, "ann")
        assert await rows_of(pool, "ann") == [] and len(await rows_of(pool, "ben")) == 3


async def test_small_talk_gets_no_excerpts_even_when_past_chats_hold_the_same_small_talk(graph, user_id, scripted):
    name, model = scripted
    await say(graph, user_id, "Hi! How are you doing today?", name)
    await say(graph, user_id, "Hey, how are you today?", name)
    assert excerpts_section(model) == ""


async def test_the_index_refuses_to_file_anything_under_another_users_thread(backend, user_id, minilm):
    """The rule lives in the index's own write (storage.episodes.sync_thread), not in the node that
    calls it: no caller files one user's words under a thread another user owns."""
    other = f"other-{uuid.uuid4().hex[:8]}"
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    await thread_owners.claim_ownership(backend.pool, thread_id, other)
    said = datetime(2024, 3, 1, tzinfo=timezone.utc)
    forged = [stamp_sent_at(HumanMessage("I keep bees on the roof", id="m0"), said)]
    with pytest.raises(thread_owners.ThreadTaken):
        await episodes.index_thread(backend.pool, minilm.embeddings, user_id, thread_id, forged)
    assert await rows_of(backend.pool, user_id) == []
    await episodes.index_thread(backend.pool, minilm.embeddings, other, thread_id, forged)  # its owner's rows are written
    assert [r["message_id"] for r in await rows_of(backend.pool, other)] == ["m0"]


async def test_an_owner_with_many_messages_is_searched_through_the_partitions_indexes_and_finds_the_same(backend, user_id, minilm, monkeypatch):
    emb = minilm.embeddings
    said = datetime(2024, 3, 1, tzinfo=timezone.utc)
    texts = ["I keep bees on the roof", "How many hives?", "Three hives", "I also play the cello"]
    messages = [stamp_sent_at((HumanMessage if i % 2 == 0 else AIMessage)(t, id=f"m{i}"), said) for i, t in enumerate(texts)]
    await episodes.index_thread(backend.pool, emb, user_id, "t1", messages)
    exact = [f.candidate.message_id for f in await episodes.fused_search(backend.pool, emb, user_id, "beehives on the roof")]
    shapes: list[bool] = []
    statements = episode_table.search_statements

    def recording(conn, owner, *, large=False, dated=False):
        shapes.append(large)
        return statements(conn, owner, large=large, dated=dated)

    monkeypatch.setattr(episode_table, "search_statements", recording)
    monkeypatch.setattr(episode_table, "LARGE_OWNER", 3)
    monkeypatch.setattr(episode_table, "through_hnsw", lambda *size: True)  # 4 messages: the index only when told
    assert [f.candidate.message_id for f in await episodes.fused_search(backend.pool, emb, user_id, "beehives on the roof")] == exact
    assert shapes and all(shapes)  # the operator forms, which the partition's HNSW and GIN indexes serve
    async with backend.pool.connection() as conn:
        words, rows = statements(conn, user_id, large=True)
        assert "<=>" in rows.as_string(conn) and "@@" in words.as_string(conn)
        words, rows = statements(conn, user_id, large=False)  # a small owner's: no index can serve them
        assert "cosine_distance(" in rows.as_string(conn) and "ts_match_vq(" in words.as_string(conn)


async def test_a_bulk_copy_seeds_rows_the_search_reads_like_any_other(backend, user_id, minilm):
    """What benchmarks and imports of pre-embedded history use: one COPY, no per-row round trip."""
    said = datetime(2024, 6, 1, tzinfo=timezone.utc)
    texts = ["We moved to Porto in April", "The flat has a view of the river", "I started a pottery class"]
    vectors = await minilm.embeddings.aembed_documents(texts)
    rows = [
        episode_table.Episode("t-bulk", f"b{i}", i, "user", said, text, owner=user_id, embedding=vector)
        for i, (text, vector) in enumerate(zip(texts, vectors))
    ]
    async with backend.pool.connection() as conn:
        assert await episode_table.copy_episodes(conn, rows) == 3
    found = await episodes.fused_search(backend.pool, minilm.embeddings, user_id, "When did we move to Porto?")
    assert found[0].candidate.message_id == "b0" and found[0].candidate.sent_at == said


async def test_a_bulk_copy_never_files_a_message_under_another_users_thread(backend, user_id):
    """copy_episodes wrote rows owned by one user into a thread another user owns, which
    sync_thread refuses: the bulk path now holds the same rule, and writes nothing."""
    said = datetime(2024, 6, 1, tzinfo=timezone.utc)
    theirs = f"t-{uuid.uuid4().hex[:8]}"
    await thread_owners.create(backend.pool, theirs, "someone-else")
    mine = episode_table.Episode(f"t-{uuid.uuid4().hex[:8]}", "m0", 0, "user", said, "My own words", owner=user_id)
    intruder = episode_table.Episode(theirs, "x0", 0, "user", said, "Filed under their chat", owner=user_id)
    async with backend.pool.connection() as conn:
        with pytest.raises(thread_owners.ThreadTaken):
            await episode_table.copy_episodes(conn, [mine, intruder])
        with pytest.raises(ValueError, match="two owners"):
            await episode_table.copy_episodes(conn, [mine, episode_table.Episode(mine.thread_id, "m1", 1, "user", said, "Mine too", owner="someone-else")])
        assert await episode_table.copy_episodes(conn, [mine]) == 1
    async with backend.pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT thread_id FROM {episode_table.TABLE} WHERE owner = %s", (user_id,))).fetchall()
    assert [r["thread_id"] for r in rows] == [mine.thread_id]


async def count_kept_and_real(pool, user: str) -> tuple[int, int]:
    async with pool.connection() as conn:
        real = await (await conn.execute(f"SELECT count(*) AS n FROM {episode_table.TABLE} WHERE owner = %s", (user,))).fetchone()
    return await episode_table.count(pool, user), real["n"]


@pytest.mark.slow
async def test_the_message_count_kept_beside_the_index_follows_every_write(graph, backend, user_id, scripted, minilm):
    """The search's word weights read the owner's count from the counts table: every write path keeps it."""
    from app.http.routes_chats import checkpoint_before
    from memory.reindex import reindex_episodes

    name, _ = scripted
    config, _ = await say(graph, user_id, "I live in Rome", name)
    _, turn = await say(graph, user_id, "My dog is called Rex", name, config)
    assert await count_kept_and_real(backend.pool, user_id) == (4, 4)
    fork = await checkpoint_before(graph, config["configurable"]["thread_id"], turn.values["messages"][2].id)
    async for _ in graph.astream({"messages": [HumanMessage("My dog is called Max")]}, fork, context=Context(user_id=user_id, model=name)):
        pass  # an edit: the abandoned branch is retracted, the new one written
    assert await count_kept_and_real(backend.pool, user_id) == (4, 4)
    said = datetime(2024, 6, 1, tzinfo=timezone.utc)
    bulk = [episode_table.Episode("t-bulk", f"b{i}", i, "user", said, f"bulk {i}", owner=user_id) for i in range(3)]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, bulk)
    assert await count_kept_and_real(backend.pool, user_id) == (7, 7)
    await episode_table.delete_messages(backend.pool, user_id, "t-bulk", ["b0", "missing"])
    assert await count_kept_and_real(backend.pool, user_id) == (6, 6)
    await delete_chat(backend, user_id, config["configurable"]["thread_id"])
    assert await count_kept_and_real(backend.pool, user_id) == (2, 2)
    other, _ = await say(graph, user_id, "I grow tomatoes", name)
    await episode_table.delete_thread(backend.pool, user_id, other["configurable"]["thread_id"])  # as reindex does
    await reindex_episodes(backend.pool, minilm)  # rebuilt from the checkpoints: both chats again
    assert await count_kept_and_real(backend.pool, user_id) == (4, 4)
    await forget_user_everywhere(backend, user_id)
    assert await count_kept_and_real(backend.pool, user_id) == (0, 0)
    async with backend.pool.connection() as conn:
        left = await (await conn.execute(f"SELECT count(*) AS n FROM {episode_table.COUNTS} WHERE owner = %s", (user_id,))).fetchone()
    assert left["n"] == 0  # forget-me leaves no trace of the user


@pytest.mark.slow
async def test_an_index_from_before_the_counts_were_kept_is_counted_and_loses_its_shared_word_index(new_database, minilm):
    async with pool_on_new_database(new_database("episodes_migrated")) as pool:
        await episode_table.setup(pool, minilm.dims)
        said = datetime(2024, 1, 2, tzinfo=timezone.utc)
        async with pool.connection() as conn:
            for statement in thread_owners.CREATE:  # a copy checks whose each thread is
                await conn.execute(statement)
            await episode_table.copy_episodes(
                conn, [episode_table.Episode(f"t-{o}", f"m{i}", i, "user", said, "hello", owner=o) for o in ("ann", "ben") for i in range(3 if o == "ann" else 2)]
            )
            # As the index was before: no counts, one GIN over everyone's words.
            await conn.execute(f"DROP TABLE {episode_table.COUNTS}")
            await conn.execute(f"CREATE INDEX {episode_table.TABLE}_tsv ON {episode_table.TABLE} USING gin (tsv)")
        await episode_table.setup(pool, minilm.dims)
        assert (await episode_table.count(pool, "ann"), await episode_table.count(pool, "ben")) == (3, 2)
        async with pool.connection() as conn:
            shared = await (await conn.execute("SELECT to_regclass(%s) AS r", (f"{episode_table.TABLE}_tsv",))).fetchone()
        assert shared["r"] is None


async def test_a_message_holding_a_rare_word_is_found_however_many_messages_hold_a_common_one(backend, user_id, minilm, monkeypatch):
    """The full-text arm reads at most PER_WORD messages per word: a common word cannot crowd out a rare one."""
    monkeypatch.setattr(episode_table, "PER_WORD", 3)
    said = datetime(2024, 6, 1, tzinfo=timezone.utc)
    texts = [f"We talked about the garden again ({i})" for i in range(12)] + ["The garden has a quince tree"]
    rows = [episode_table.Episode("t", f"g{i}", i, "user", said, t, owner=user_id) for i, t in enumerate(texts)]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    found = await episode_table.search(backend.pool, user_id, "the quince in my garden", None, k=5)
    by_rank = sorted((c for c in found if c.text_rank is not None), key=lambda c: c.text_rank)
    assert by_rank[0].message_id == "g12" and len(by_rank) <= 5
    assert by_rank[0].coverage == 1.0 and all(c.coverage < 0.5 for c in by_rank[1:])  # the rare word weighs more


async def test_messages_matching_the_same_words_rank_oldest_first_whatever_their_ids(backend, user_id):
    """Ties in the full-text arm went by message id, random at an import, so two imports of one
    conversation ranked differently. The older message comes first (where a thing was first told),
    and the order is the same however the ids sort."""
    texts = ["We planted the quince by the fence", "The quince by the fence got planted", "Planted quince, by the fence"]
    days = [datetime(2024, 6, d, tzinfo=timezone.utc) for d in (3, 9, 5)]
    ids = ["z-old", "a-new", "m-mid"]  # the ids' order (and the rows') is not the times'
    rows = [episode_table.Episode("t-q", i, n, "user", when, t, owner=user_id) for n, (i, when, t) in enumerate(zip(ids, days, texts))]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    found = await episode_table.search(backend.pool, user_id, "the quince by the fence", None, k=5)
    assert [c.message_id for c in sorted(found, key=lambda c: c.text_rank)] == ["z-old", "m-mid", "a-new"]


async def test_a_short_answer_comes_with_the_question_before_it_and_a_question_with_the_answer_after_it(backend, user_id, minilm):
    """A turn alone that says little ("The beagle, in March.") is excerpted with the turn before it,
    and a question found is excerpted with its answer, though neither neighbour matches the message."""
    said = datetime(2024, 3, 1, tzinfo=timezone.utc)
    texts = [
        "What did you do on Sunday?",
        "The beagle, in March.",
        "My cousin repaired the roof of the garage over the weekend.",
        "Which instrument do you play at the community school?",
        "Every morning for two years now, before work, with a teacher from Lisbon.",
    ]
    vectors = await minilm.embeddings.aembed_documents(texts)
    rows = [
        episode_table.Episode("t-pets", f"p{i}", i, "user" if i % 2 == 0 else "assistant", said + timedelta(minutes=i), text, owner=user_id, embedding=vector)
        for i, (text, vector) in enumerate(zip(texts, vectors))
    ]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    found = {c.message_id: c for c in await episode_table.search(backend.pool, user_id, "beagle instrument garage roof", None, k=10)}
    assert found["p1"].before.message_id == "p0" and found["p1"].after.message_id == "p2"
    assert found["p3"].before.message_id == "p2" and found["p3"].after.message_id == "p4"

    def lines(excerpts) -> list[str]:
        return [line["message_id"] for e in excerpts for line in e["lines"]]

    assert lines(await episodes.recall(backend.pool, minilm.embeddings, user_id, "When did we get the beagle?")) == ["p0", "p1"]
    assert lines(await episodes.recall(backend.pool, minilm.embeddings, user_id, "Which instrument do I play at the community school?")) == ["p3", "p4"]


async def test_a_message_is_found_by_the_date_its_yesterday_meant_on_every_write_path(backend, user_id, minilm):
    """"Yesterday" said on 8 May 2023 is searched as 7 May 2023 too: a question naming that day finds
    it by its words, though it was said the day after (docs/episodic-memory.md: the measure)."""
    said = datetime(2023, 5, 8, 14, tzinfo=timezone.utc)
    texts = ["Yesterday I walked the whole Douro riverside with my sister", "The flat has a view of the river", "I started a pottery class"]
    vectors = await minilm.embeddings.aembed_documents(texts)
    synced = [episode_table.Episode("t-sync", f"s{i}", i, "user", said, t, owner=user_id, embedding=v) for i, (t, v) in enumerate(zip(texts, vectors))]
    copied = [episode_table.Episode("t-copy", f"c{i}", i, "user", said, t, owner=user_id, embedding=v) for i, (t, v) in enumerate(zip(texts, vectors))]
    await episode_table.sync_thread(backend.pool, user_id, "t-sync", keep=[e.message_id for e in synced], write=synced)
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, copied)
    found = await episode_table.search(backend.pool, user_id, "What did I do on 7 May 2023?", None, k=5)
    by_words = {c.message_id for c in found if c.text_rank is not None}
    assert by_words == {"s0", "c0"}
    # The excerpt still shows what was said (the dates are searched, not shown as words of the message).
    assert {c.content for c in found if c.message_id == "s0"} == {texts[0]}
    # A question naming no date is not matched by the dates: "may" here is not May.
    undated = await episode_table.search(backend.pool, user_id, "I may have told you about it", None, k=5)
    assert [c.message_id for c in undated if c.text_rank is not None] == []


async def test_a_message_naming_a_day_its_month_lacks_is_written_on_every_write_path(backend, user_id, minilm):
    """"See you on the 30th!" said in February raised out of the date rules, and its write with it:
    the thread's index stopped there (a review, stop 61). It is written, found, and gets no date."""
    said = datetime(2023, 2, 10, 14, tzinfo=timezone.utc)
    text = "Booked the flights to Lisbon, I'll see you on the 30th!"
    [vector] = await minilm.embeddings.aembed_documents([text])
    await episode_table.sync_thread(backend.pool, user_id, "t-feb", keep=["f0"], write=[episode_table.Episode("t-feb", "f0", 0, "user", said, text, owner=user_id, embedding=vector)])
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, [episode_table.Episode("t-feb-copy", "g0", 0, "user", said, text, owner=user_id, embedding=vector)])
    found = await episode_table.search(backend.pool, user_id, "flights to Lisbon", None, k=5)
    assert {c.message_id for c in found if c.text_rank is not None} == {"f0", "g0"}
    async with backend.pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT dates_meant FROM {episode_table.TABLE} WHERE owner = %s", (user_id,))).fetchall()
    assert [r["dates_meant"] for r in rows] == ["", ""]


async def test_a_forget_that_rewrites_the_yesterday_away_takes_its_date_out_of_the_search(backend, user_id, minilm):
    from storage import episode_rewrites

    said = datetime(2023, 5, 8, 14, tzinfo=timezone.utc)
    text = "Yesterday I saw Dr. Lee about my knee"
    [vector] = await minilm.embeddings.aembed_documents([text])
    row = episode_table.Episode("t-forget", "m0", 0, "user", said, text, owner=user_id, embedding=vector)
    await episode_table.sync_thread(backend.pool, user_id, "t-forget", keep=["m0"], write=[row])
    assert [c.message_id for c in await episode_table.search(backend.pool, user_id, "7 May 2023", None, k=5) if c.text_rank] == ["m0"]
    await episode_rewrites.rewrite(backend.pool, user_id, [episode_rewrites.Rewrite("t-forget", "m0", "[forgotten]", vector)])
    assert [c.message_id for c in await episode_table.search(backend.pool, user_id, "7 May 2023", None, k=5) if c.text_rank] == []


async def test_an_index_from_before_the_dates_meant_gets_them_from_the_set_up_and_keeps_every_row(new_database, minilm):
    """A table as the previous release left it (words of the text alone, no dates_meant): the set-up
    (and so `memory-agent migrate`) adds the column, works the dates out for the rows already there
    and builds the words index again."""
    said = datetime(2023, 5, 8, 14, tzinfo=timezone.utc)
    async with pool_on_new_database(new_database("episodes_dates_meant")) as pool:
        await episode_table.setup(pool, minilm.dims)
        async with pool.connection() as conn:
            await conn.execute(f"ALTER TABLE {episode_table.TABLE} DROP COLUMN tsv")
            await conn.execute(f"ALTER TABLE {episode_table.TABLE} DROP COLUMN dates_meant")
            await conn.execute(
                f"ALTER TABLE {episode_table.TABLE} ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED"
            )
            await conn.execute(f"CREATE INDEX {episode_table.WORDS_INDEX} ON {episode_table.TABLE} USING gin (tsv)")
            await conn.execute(
                f"INSERT INTO {episode_table.TABLE} (owner, thread_id, message_id, position, role, sent_at, content) VALUES "
                "('ann', 't', 'm0', 0, 'user', %s, 'Yesterday I biked to Sintra'), ('ann', 't', 'm1', 1, 'user', %s, 'Nice weather today'),"
                "('ben', 't2', 'm0', 0, 'user', %s, 'Two days ago my cat got lost')",
                (said, said, said),
            )
        done = await episode_table.setup(pool, minilm.dims)
        assert any("dates meant" in line and " 2 messages" in line for line in done)
        assert [c.message_id for c in await episode_table.search(pool, "ann", "7 May 2023", None, k=5) if c.text_rank] == ["m0"]
        assert [c.message_id for c in await episode_table.search(pool, "ben", "6 May 2023", None, k=5) if c.text_rank] == ["m0"]
        async with pool.connection() as conn:
            rows = await (await conn.execute(f"SELECT count(*) AS n FROM {episode_table.TABLE}")).fetchone()
            index = await (await conn.execute("SELECT to_regclass(%s) AS r", (episode_table.WORDS_INDEX,))).fetchone()
        assert rows["n"] == 3 and index["r"] is not None
        assert await episode_table.setup(pool, minilm.dims) == []  # once: a second set-up has nothing to do


async def test_the_dates_meant_of_an_older_table_are_worked_out_a_batch_at_a_time_and_none_is_missed(new_database, minilm):
    """The backfill reads the rows through a server-side cursor, ``batch`` at a time (a table of
    millions is never held in memory at once): every batch's rows get their dates, and a row the hint
    matches but that means no date ("at last") is read and left as it is."""
    said = datetime(2023, 5, 8, 14, tzinfo=timezone.utc)
    texts = ["Yesterday I biked", "At last it rained", "Two days ago I swam", "Last week was long", "Nothing dated here", "Tomorrow I fly"]
    async with pool_on_new_database(new_database("episodes_dates_batches")) as pool:
        await episode_table.setup(pool, minilm.dims)
        async with pool.connection() as conn:
            for i, text in enumerate(texts):
                await conn.execute(
                    f"INSERT INTO {episode_table.TABLE} (owner, thread_id, message_id, position, role, sent_at, content, dates_meant) "
                    "VALUES ('ann', 't', %s, %s, 'user', %s, %s, '')",
                    (f"m{i}", i, said, text),
                )
            async with conn.transaction():
                dated = await episode_table._work_out_dates_meant(conn, batch=2)
            rows = await (await conn.execute(f"SELECT message_id, dates_meant FROM {episode_table.TABLE} ORDER BY position")).fetchall()
    assert dated == 4
    assert [r["dates_meant"] for r in rows] == [
        "7 May 2023", "", "6 May 2023", "the week before 8 May 2023", "", "9 May 2023",
    ]


async def test_dates_stored_by_older_rules_are_worked_out_again_at_set_up(new_database, minilm):
    """The rules read "the day after tomorrow" as tomorrow and "the last month" as the calendar
    month before; a message stored then keeps those words in its index until the set-up finds
    the stored dates are of older rules and works them out again (once)."""
    said = datetime(2023, 5, 8, 14, tzinfo=timezone.utc)
    texts = {"m0": ("I'm leaving the day after tomorrow", "9 May 2023"), "m1": ("So much happened in the last month", "April 2023"), "m2": ("Yesterday I biked", "7 May 2023")}
    async with pool_on_new_database(new_database("episodes_dates_rules")) as pool:
        assert await episode_table.setup(pool, minilm.dims) == []
        async with pool.connection() as conn:
            for i, (message_id, (text, old)) in enumerate(texts.items()):
                await conn.execute(
                    f"INSERT INTO {episode_table.TABLE} (owner, thread_id, message_id, position, role, sent_at, content, dates_meant) "
                    "VALUES ('ann', 't', %s, %s, 'user', %s, %s, %s)",
                    (message_id, i, said, text, old),
                )
            await conn.execute(f"COMMENT ON COLUMN {episode_table.TABLE}.dates_meant IS 'core.past_dates rules 1'")
        done = await episode_table.setup(pool, minilm.dims)
        async with pool.connection() as conn:
            rows = await (await conn.execute(f"SELECT message_id, dates_meant FROM {episode_table.TABLE} ORDER BY position")).fetchall()
        assert any("worked out again" in line and " 2 messages" in line for line in done)
        assert [r["dates_meant"] for r in rows] == ["10 May 2023", "", "7 May 2023"]
        by_words = sorted((c for c in await episode_table.search(pool, "ann", "10 May 2023", None, k=5) if c.text_rank), key=lambda c: c.text_rank)
        assert by_words[0].message_id == "m0"
        assert [c.message_id for c in await episode_table.search(pool, "ann", "April 2023", None, k=5) if c.text_rank] == []
        assert await episode_table.setup(pool, minilm.dims) == []
        # dates of newer rules (a newer release beside this one) are left as they are
        async with pool.connection() as conn:
            await conn.execute(f"UPDATE {episode_table.TABLE} SET dates_meant = 'newer' WHERE message_id = 'm2'")
            await conn.execute(f"COMMENT ON COLUMN {episode_table.TABLE}.dates_meant IS 'core.past_dates rules 99'")
        assert await episode_table.setup(pool, minilm.dims) == []
        async with pool.connection() as conn:
            kept = await (await conn.execute(f"SELECT dates_meant FROM {episode_table.TABLE} WHERE message_id = 'm2'")).fetchone()
        assert kept["dates_meant"] == "newer"


async def test_a_question_naming_a_span_ranks_what_was_said_in_it_first(backend, user_id, minilm, monkeypatch):
    """"In May" searches May too, and what was said then comes first, though by its words and
    meaning what was said in September comes first."""
    texts = [
        ("We repainted the garage door in bright red", datetime(2023, 9, 20, 10, tzinfo=timezone.utc)),
        ("The old door out back got a new coat of green paint", datetime(2023, 5, 12, 10, tzinfo=timezone.utc)),
        ("My cousin fixed the bike's brakes", datetime(2023, 7, 2, 10, tzinfo=timezone.utc)),
    ]
    vectors = await minilm.embeddings.aembed_documents([t for t, _ in texts])
    rows = [episode_table.Episode(f"t-door{i}", f"d{i}", 0, "user", when, text, owner=user_id, embedding=v) for i, ((text, when), v) in enumerate(zip(texts, vectors))]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    question, now = "Which colour did we repaint the garage door in May?", datetime(2023, 10, 1, tzinfo=timezone.utc)

    async def first_found() -> str:
        return (await episodes.recall_ranked(backend.pool, minilm.embeddings, user_id, question, now=now))[0]["lines"][0]["message_id"]

    assert await first_found() == "d1"
    monkeypatch.setattr(episodes, "TIME_AWARE", False)
    assert await first_found() == "d0"


async def test_a_question_naming_a_span_is_answered_from_what_was_said_in_it_though_nothing_clears_the_gate(backend, user_id, minilm):
    """"Where was I between August 11 and August 15?" is like no message enough for the gate (the
    Chicago trip: similarity 0.43, no shared word), yet it asks what was said then: a message said
    in the span, near enough, admits it. The same message said in September does not, and a
    question about May that nothing said in May is near gets nothing."""
    chicago = "I was away in Chicago for a few days, visiting my brother."
    others = [("We repainted the garage door in bright red", datetime(2023, 9, 20, 10, tzinfo=timezone.utc)),
              ("The old door out back got a new coat of green paint", datetime(2023, 5, 12, 10, tzinfo=timezone.utc))]
    question, now = "Where was I between August 11 and August 15?", datetime(2023, 10, 1, tzinfo=timezone.utc)

    async def seed(owner: str, trip_said: datetime) -> None:
        texts = [(chicago, trip_said), *others]
        vectors = await minilm.embeddings.aembed_documents([t for t, _ in texts])
        rows = [episode_table.Episode(f"t-{owner}", f"s{i}", i, "user", when, text, owner=owner, embedding=v)
                for i, ((text, when), v) in enumerate(zip(texts, vectors))]
        async with backend.pool.connection() as conn:
            await episode_table.copy_episodes(conn, rows)

    async def found(owner: str, asked: str = question) -> list[str]:
        return [p["lines"][0]["text"] for p in await episodes.recall_ranked(backend.pool, minilm.embeddings, owner, asked, now=now)]

    later = f"{user_id}-later"
    await seed(user_id, datetime(2023, 8, 13, 18, tzinfo=timezone.utc))
    await seed(later, datetime(2023, 9, 2, 18, tzinfo=timezone.utc))
    assert (await found(user_id))[0] == chicago
    assert await found(later) == []
    assert await found(user_id, "What's the weather usually like in Lisbon in May?") == []


async def test_a_question_about_a_span_not_yet_over_is_not_admitted_by_what_was_said_in_it(backend, user_id, minilm):
    """"Any good films to see this month?" asks for advice, not what was said: a message of this
    month at a similarity the span's floor would pass (0.37) does not admit it, as no other does."""
    text, said = "The cinema downtown reopened, we saw a thriller there.", datetime(2023, 10, 2, 18, tzinfo=timezone.utc)
    vector = (await minilm.embeddings.aembed_documents([text]))[0]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, [episode_table.Episode("t-films", "f0", 0, "user", said, text, owner=user_id, embedding=vector)])
    now = datetime(2023, 10, 5, 12, tzinfo=timezone.utc)
    assert await episodes.recall_ranked(backend.pool, minilm.embeddings, user_id, "Any good films to see this month?", now=now) == []


FILLER = ["Thanks, Melanie!", "Haha, yes!", "See you soon!", "Totally agree.", "Good to hear from you!", "Same here.", "That means a lot.", "Bye for now!"]
ANSWER = "Caroline: I've been looking into adoption agencies lately, reading about how they work."


async def seed_transcript(backend, user_id, minilm, rounds: int, name: str = "Caroline") -> str:
    """An imported transcript: each turn starts with its speaker's name. The answer's id."""
    texts = [f"{name}: {t}" for t in FILLER] * rounds + ["Melanie: How was your week?", "Melanie: I went camping with the kids.", ANSWER]
    said = datetime(2023, 5, 8, tzinfo=timezone.utc)
    vectors = await minilm.embeddings.aembed_documents(texts)
    rows = [episode_table.Episode("t-tr", f"c{i}", i, "user", said, t, owner=user_id, embedding=v) for i, (t, v) in enumerate(zip(texts, vectors))]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    return f"c{len(texts) - 1}"


@pytest.mark.slow
async def test_a_name_before_every_turn_does_not_decide_what_a_question_naming_it_finds(backend, user_id, minilm, monkeypatch):
    """"What did Caroline research?" over a transcript whose every turn starts "Caroline:": the
    name's direction is taken out of the question's vector, so the turn about what she looked into
    ranks first, not the turns where the name is nearly all there is ("Caroline: Same here.").
    The gate still sees the similarity to the question as asked."""
    answer_id = await seed_transcript(backend, user_id, minilm, rounds=3)  # "Caroline" in 25 of 27
    question = "What did Caroline research?"

    async def vector_first() -> tuple[str, float]:
        found = await episodes.fused_search(backend.pool, minilm.embeddings, user_id, question, gate=None)
        best = min((f.candidate for f in found if f.candidate.vector_rank), key=lambda c: c.vector_rank)
        return best.message_id, best.similarity

    asked = await minilm.embeddings.aembed_query(question)
    answer = (await minilm.embeddings.aembed_documents([ANSWER]))[0]
    message_id, similarity = await vector_first()
    assert message_id == answer_id
    assert similarity == pytest.approx(sum(a * b for a, b in zip(asked, answer)), abs=1e-4)
    monkeypatch.setattr(episodes, "COMMON_WORD_SHARE", None)
    assert (await vector_first())[0] != answer_id  # as the vector arm ranked before


async def test_only_the_questions_words_held_by_the_given_share_and_count_of_messages_leave_its_vector(backend, user_id, minilm):
    """The words statement names them as the question wrote them ("Caroline", not its lexeme);
    a question without such a word is searched by its own vector, and so is one over fewer
    messages holding it than the count asked for (a new user's few messages)."""
    await seed_transcript(backend, user_id, minilm, rounds=1)  # "Caroline" in 9 of 11, "Melanie" in 4
    handed: list[list[str]] = []

    async def without(vector, words):
        handed.append(words)
        return vector

    vector = await minilm.embeddings.aembed_query("x")
    for question in ("What did Caroline research?", "Where did Melanie go camping?", "adoption agencies"):
        await episode_table.search(backend.pool, user_id, question, vector, k=5, common_share=0.5, without_words=without)
    assert handed == [["Caroline"]]
    await episode_table.search(backend.pool, user_id, "What did Caroline research?", vector, k=5, common_share=0.5, common_min=10, without_words=without)
    assert handed == [["Caroline"]]


async def test_a_name_written_in_letters_beyond_ascii_is_found_common_too(backend, user_id, minilm):
    """The words are the text search parser's tokens, not a pattern's, whose letters follow the
    database's collation."""
    await seed_transcript(backend, user_id, minilm, rounds=1, name="Zoë")
    handed: list[list[str]] = []

    async def without(vector, words):
        handed.append(words)
        return vector

    vector = await minilm.embeddings.aembed_query("x")
    await episode_table.search(backend.pool, user_id, "What did Zoë research?", vector, k=5, common_share=0.5, without_words=without)
    assert handed == [["Zoë"]]


@pytest.mark.slow
async def test_a_word_held_by_more_messages_than_the_full_text_arm_reads_is_still_found_common(backend, user_id):
    """A user of 3,400 messages: a tenth of them is 340, more than the words statement reads of a
    word (``PER_WORD``), so its count could never show a word that common and the rule never fired
    for such a user. A word it cannot count is judged by its share of the user's latest messages;
    so is every word when the question names a span (whose messages are fewer than the user's)."""
    rng = random.Random(11)
    said = datetime(2024, 1, 1, tzinfo=timezone.utc)

    def content(i: int) -> str:
        words = [f"note {i}"]
        words += ["Caroline"] if i % 2 == 0 else []  # half of all: common
        words += ["garden"] if i % 17 == 0 else []  # 200, counted exactly: a seventeenth, not common
        words += ["violin"] if i < 400 else []  # the oldest 400: none of the latest, not common now
        words += ["pottery"] if i >= 3_000 else []  # the latest 400: common now
        return " ".join(words)

    rows = [
        episode_table.Episode(
            "t-long", f"m{i}", i, "user", said + timedelta(hours=i), content(i), owner=user_id,
            embedding=[rng.uniform(-1, 1) for _ in range(384)],
        )
        for i in range(3_400)
    ]
    async with backend.pool.connection() as conn:
        await episode_table.copy_episodes(conn, rows)
    handed: list[list[str]] = []

    async def without(vector, words):
        handed.append(words)
        return vector

    for question in ("What did Caroline research?", "Caroline garden", "violin pottery"):
        await episode_table.search(backend.pool, user_id, question, rows[0].embedding, k=5, common_share=0.1, common_min=20, without_words=without)
    assert handed == [["Caroline"], ["Caroline"], ["pottery"]]
    handed.clear()
    # a span of 100 messages, 50 of them with "Caroline": still the user's common word
    since, until = said + timedelta(hours=1_000), said + timedelta(hours=1_100)
    await episode_table.search(backend.pool, user_id, "Caroline garden", rows[0].embedding, k=5, since=since, until=until, common_share=0.1, common_min=20, without_words=without)
    assert handed == [["Caroline"]]


class WordsWillNotEmbed:
    """The question embeds; the common words do not (a remote embedder failing in between)."""

    def __init__(self, embeddings):
        self.embeddings = embeddings

    async def aembed_query(self, text):
        return await self.embeddings.aembed_query(text)

    async def aembed_documents(self, texts):
        raise RuntimeError("the embedder went away")


async def test_when_the_common_words_cannot_be_embedded_the_question_is_searched_by_its_own_vector(backend, user_id, minilm, monkeypatch):
    await seed_transcript(backend, user_id, minilm, rounds=3)
    question = "What did Caroline research?"
    found = await episodes.fused_search(backend.pool, WordsWillNotEmbed(minilm.embeddings), user_id, question, gate=None)
    monkeypatch.setattr(episodes, "COMMON_WORD_SHARE", None)
    plain = await episodes.fused_search(backend.pool, minilm.embeddings, user_id, question, gate=None)
    assert found and [f.candidate.message_id for f in found] == [f.candidate.message_id for f in plain]


def plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


async def test_a_grown_owners_search_reads_each_found_message_by_its_key(new_database, minilm, monkeypatch):
    """A user whose messages grew after the planner's statistics were taken (a long chat indexed,
    an import) was taken for the handful of rows they had: the rows statement read all of their
    rows once per candidate (60-100 ms for a chat of 2,000 messages instead of ~8). Passing a
    statistics mark refreshes the partition's statistics, and each found message is looked up by
    its key."""
    from memory.backend import open_memory

    rng = random.Random(7)
    owner = "u-grown"
    said = datetime(2024, 6, 1, tzinfo=timezone.utc)

    def episode(i: int) -> episode_table.Episode:
        vector = [rng.uniform(-1, 1) for _ in range(minilm.dims)]
        return episode_table.Episode("t-long", f"m{i}", i, "user", said + timedelta(minutes=i), f"message number {i}", owner=owner, embedding=vector)

    async with open_memory(new_database("grown-owner"), minilm) as b:
        await episode_table.sync_thread(b.pool, owner, "t-long", keep=[f"m{i}" for i in range(5)], write=[episode(i) for i in range(5)])
        async with b.pool.connection() as conn:
            # Other owners fill the owner's partition (a deployment's many users), and the
            # statistics are taken while the owner has 5 rows there.
            insert = (
                f"INSERT INTO {episode_table.TABLE} (owner, thread_id, message_id, position, role, sent_at, content) "
                "SELECT o, 't', 'm' || g, g, 'user', now(), 'other words ' || g FROM unnest(%s::text[]) o, generate_series(1, %s) g"
            )
            await conn.execute(insert, ([f"o{i}" for i in range(2000)], 1))
            mine = f"SELECT DISTINCT owner FROM {episode_table.TABLE} WHERE tableoid = (SELECT tableoid FROM {episode_table.TABLE} WHERE owner = %s LIMIT 1) AND owner <> %s"
            neighbours = [r["owner"] for r in await (await conn.execute(mine, (owner, owner))).fetchall()]
            await conn.execute(f"DELETE FROM {episode_table.TABLE} WHERE owner LIKE 'o%%' AND NOT (owner = ANY(%s))", (neighbours,))
            await conn.execute(insert.replace("'m' || g", "'n' || g"), (neighbours, 200))
            await conn.execute(f"ANALYZE {episode_table.TABLE}")
            part = await leaf_of(conn, episode_table.TABLE, "owner", owner)
            await conn.execute(f"ALTER TABLE {part} SET (autovacuum_enabled = false)")  # only the write's own refresh analyzes it
        grown = [episode(i) for i in range(600)]
        await episode_table.sync_thread(b.pool, owner, "t-long", keep=[e.message_id for e in grown], write=grown)

        async with b.pool.connection() as conn:
            estimate = await (await conn.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {episode_table.TABLE} WHERE owner = %s", (owner,))).fetchone()
        assert list(estimate.values())[0][0]["Plan"]["Plan Rows"] >= 300  # the statistics follow the owner

        plans: list[dict] = []
        rows_statement = episode_table._rows

        async def explained(conn, statement, params, *, approximate):
            cur = await conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params, prepare=False)
            plans.append(list((await cur.fetchone()).values())[0][0]["Plan"])
            return await rows_statement(conn, statement, params, approximate=approximate)

        monkeypatch.setattr(episode_table, "_rows", explained)
        found = await episode_table.search(b.pool, owner, "message number 42", episode(0).embedding, k=40)
    assert len(found) >= 40 and plans  # both arms' candidates
    nodes = list(plan_nodes(plans[0]))
    assert sum(n.get("Rows Removed by Join Filter", 0) for n in nodes) < 600  # no rescan of the candidates per row
    lookups = [n for n in nodes if n.get("Actual Loops", 0) == len(found) and n.get("Relation Name", "").startswith(episode_table.TABLE) and "Index Cond" in n and "message_id" in n["Index Cond"]]
    assert lookups and all(n["Index Name"].endswith("_pkey") for n in lookups)


async def test_a_partition_held_by_maintenance_delays_no_write_past_a_moment(new_database, minilm, caplog):
    """The statistics refresh after a write waits at most a moment for a partition that a VACUUM or
    an index build holds: the write stands, the refresh is logged as skipped."""
    import logging
    import time

    caplog.set_level(logging.INFO, logger=episode_table.__name__)

    from memory.backend import open_memory
    from storage.postgres import open_pool

    owner, said = "u-held", datetime(2024, 6, 1, tzinfo=timezone.utc)
    rows = [episode_table.Episode("t", f"m{i}", i, "user", said, f"message {i}", owner=owner) for i in range(600)]
    url = new_database("held-partition")
    async with open_memory(url, minilm) as b:
        await episode_table.sync_thread(b.pool, owner, "t", keep=["m0"], write=rows[:1])
        holder = await open_pool(url, max_size=1)
        try:
            async with holder.connection() as conn, conn.transaction():
                part = await leaf_of(conn, episode_table.TABLE, "owner", owner)
                await conn.execute(f"LOCK TABLE {part} IN SHARE UPDATE EXCLUSIVE MODE")  # as VACUUM holds it
                started = time.monotonic()
                await episode_table.sync_thread(b.pool, owner, "t", keep=[r.message_id for r in rows], write=rows)
                waited = time.monotonic() - started
        finally:
            await holder.close()
        assert await episode_table.count(b.pool, owner) == 600
    assert waited < 5  # not until the maintenance ends (the test's lock is held until after this write)
    assert any("planner statistics not refreshed" in r.getMessage() for r in caplog.records)


async def test_a_bulk_copy_in_a_callers_transaction_refreshes_the_statistics_and_leaves_its_settings(new_database, minilm):
    """copy_episodes inside a caller's transaction: the owner passing a mark gets their partition
    analyzed (their uncommitted rows counted), and the caller's lock_timeout is as it was."""
    from memory.backend import open_memory

    owner, said = "u-bulk", datetime(2024, 6, 1, tzinfo=timezone.utc)
    rows = [episode_table.Episode("t", f"m{i}", i, "user", said, f"message {i}", owner=owner) for i in range(600)]
    async with open_memory(new_database("bulk-statistics"), minilm) as b:
        async with b.pool.connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL lock_timeout = '7s'")
            await episode_table.copy_episodes(conn, rows)
            assert (await (await conn.execute("SHOW lock_timeout")).fetchone())["lock_timeout"] == "7s"
            part = await leaf_of(conn, episode_table.TABLE, "owner", owner)
            stats = await (await conn.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (part,))).fetchone()
            assert stats["reltuples"] >= 600
        assert await episode_table.count(b.pool, owner) == 600
