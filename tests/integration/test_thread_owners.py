"""storage.thread_owners on the embedded Postgres: who owns a thread, decided in SQL.

The rule every entry point relies on: a first claim records its owner, another user's
claim is refused, concurrent first claims have one winner, a new thread cannot be
created under an id that has an owner or history, and the one-time backfill of an
existing database takes only owners the old data agrees on.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from core.namespaces import chats_ns
from core.schemas import ChatRecord
from memory.backend import open_memory
from storage import chat_sources, thread_owners
from storage.thread_owners import ThreadExists, ThreadTaken


def new_id() -> str:
    return str(uuid.uuid4())


def users(n: int) -> list[str]:
    return [f"u{uuid.uuid4().hex[:10]}" for _ in range(n)]


async def write_checkpoint(backend, thread_id: str) -> None:
    """History on a thread, as any run leaves it, with no owner recorded."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    await backend.checkpointer.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})


async def test_a_first_claim_records_the_owner_and_another_users_claim_is_refused(backend):
    alice, bob = users(2)
    thread = new_id()
    assert await thread_owners.owner_of(backend.pool, thread) is None
    assert await thread_owners.claim_ownership(backend.pool, thread, alice) == alice
    assert await thread_owners.claim_ownership(backend.pool, thread, alice) == alice  # again: still hers
    with pytest.raises(ThreadTaken) as refused:
        await thread_owners.claim_ownership(backend.pool, thread, bob)
    assert refused.value.owner == alice
    assert await thread_owners.owner_of(backend.pool, thread) == alice
    assert await thread_owners.threads_of(backend.pool, bob) == []


async def test_concurrent_first_claims_of_one_thread_have_exactly_one_winner(backend):
    claimants = users(8)
    for _ in range(5):
        thread = new_id()
        results = await asyncio.gather(*(thread_owners.claim_ownership(backend.pool, thread, u) for u in claimants), return_exceptions=True)
        winners = [r for r in results if isinstance(r, str)]
        assert len(winners) == 1, results
        assert all(isinstance(r, ThreadTaken) and r.owner == winners[0] for r in results if not isinstance(r, str))
        assert await thread_owners.owner_of(backend.pool, thread) == winners[0]


async def test_a_new_thread_cannot_be_created_under_an_id_with_an_owner_or_with_history(backend):
    alice, bob = users(2)
    thread = new_id()
    await thread_owners.create(backend.pool, thread, alice)
    for who in (alice, bob):  # taken, even for its owner: "new" means new
        with pytest.raises(ThreadExists):
            await thread_owners.create(backend.pool, thread, who)

    unowned = new_id()
    await write_checkpoint(backend, unowned)
    with pytest.raises(ThreadExists):
        await thread_owners.create(backend.pool, unowned, bob)
    assert await thread_owners.owner_of(backend.pool, unowned) is None


async def test_history_without_an_owner_is_refused_unless_the_caller_may_adopt_it(backend):
    alice, bob = users(2)
    unowned = new_id()
    await write_checkpoint(backend, unowned)
    with pytest.raises(ThreadTaken) as refused:
        await thread_owners.claim_ownership(backend.pool, unowned, bob, adopt_history=False)
    assert refused.value.owner is None
    # A trusted caller that runs the thread itself (the CLI, the graph's own record) adopts it.
    assert await thread_owners.claim_ownership(backend.pool, unowned, alice) == alice
    assert await thread_owners.claim_ownership(backend.pool, unowned, alice, adopt_history=False) == alice
    fresh = new_id()
    assert await thread_owners.claim_ownership(backend.pool, fresh, bob, adopt_history=False) == bob


async def test_owned_among_and_release_keep_to_the_owners_rows(backend):
    alice, bob = users(2)
    a1, a2, b1 = new_id(), new_id(), new_id()
    for thread, owner in ((a1, alice), (a2, alice), (b1, bob)):
        await thread_owners.claim_ownership(backend.pool, thread, owner)
    assert await thread_owners.owned_among(backend.pool, alice, [a1, b1, a2, new_id()]) == {a1, a2}
    await thread_owners.release(backend.pool, a1)
    assert await thread_owners.threads_of(backend.pool, alice) == [a2]
    assert await thread_owners.release_all(backend.pool, alice) == 1
    assert await thread_owners.threads_of(backend.pool, alice) == []
    assert await thread_owners.owner_of(backend.pool, b1) == bob


@pytest.mark.slow
async def test_the_first_set_up_on_an_existing_database_backfills_only_undisputed_owners(new_database, minilm):
    url = new_database("owners")
    alice, bob, carol = users(3)
    recorded, disputed, from_runs, later = new_id(), new_id(), new_id(), new_id()
    async with open_memory(url, minilm) as backend:
        async with backend.pool.connection() as conn:
            # A database from before the table (and before the imported chats' table that refers to it).
            await conn.execute(f"DROP TABLE {chat_sources.TABLE}")
            await conn.execute(f"DROP TABLE {thread_owners.TABLE}")
        await backend.store.aput(chats_ns(alice), recorded, ChatRecord(thread_id=recorded).model_dump(mode="json"), index=False)
        for user in (alice, bob):  # two users' records name one thread: one of them is forged
            await backend.store.aput(chats_ns(user), disputed, ChatRecord(thread_id=disputed).model_dump(mode="json"), index=False)
        async with backend.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker) "
                "VALUES (%s, %s, %s, 'message', 'finished', 'w')",
                (str(uuid.uuid4()), from_runs, carol),
            )

        await thread_owners.setup(backend.pool)
        assert await thread_owners.owner_of(backend.pool, recorded) == alice
        assert await thread_owners.owner_of(backend.pool, from_runs) == carol
        assert await thread_owners.owner_of(backend.pool, disputed) is None

        # Only once: records written later (which any store client could write) are never trusted.
        await backend.store.aput(chats_ns(bob), later, ChatRecord(thread_id=later).model_dump(mode="json"), index=False)
        await thread_owners.setup(backend.pool)
        assert await thread_owners.owner_of(backend.pool, later) is None


@pytest.mark.parametrize("thread_id", ["", " ", " ab", "b" * 201, "t\x00x", "t\nx"], ids=["empty", "blank", "leading_blank", "long", "nul", "newline"])
async def test_no_owner_row_is_written_for_a_chat_id_no_list_could_show(backend, thread_id):
    """`chat --chat <250 characters>` was answered and its history kept under an owner row, but its
    record (ids at most 200) could not be written, so no list showed the chat; " " made a chat with
    a blank id. Every way a thread gets its owner now refuses such an id first."""
    from core.namespaces import InvalidThreadId

    for claim in (
        lambda: thread_owners.create(backend.pool, thread_id, "alice"),
        lambda: thread_owners.claim_ownership(backend.pool, thread_id, "alice"),
        lambda: thread_owners.claim_handed_over(backend.pool, thread_id, "alice", "studio"),
    ):
        with pytest.raises(InvalidThreadId):
            await claim()
    if "\x00" not in thread_id:  # (Postgres cannot even be asked about a NUL)
        assert await thread_owners.owners_of(backend.pool, [thread_id]) == {}


async def test_a_chat_that_has_its_owner_under_an_id_made_before_the_rule_keeps_working(backend):
    """The rule is for new chats: one whose owner row was written before it (the CLI took any
    --chat) is still its owner's, and still refused to anyone else; an id with a blank inside is
    an id like any other."""
    from core.namespaces import InvalidThreadId

    legacy = f"old chat {uuid.uuid4().hex[:6]}\t"
    async with backend.pool.connection() as conn:
        await conn.execute(f"INSERT INTO {thread_owners.TABLE} (thread_id, owner) VALUES (%s, %s)", (legacy, "alice"))
    assert await thread_owners.claim_ownership(backend.pool, legacy, "alice") == "alice"
    with pytest.raises(ThreadTaken):
        await thread_owners.claim_ownership(backend.pool, legacy, "bob")
    with pytest.raises(InvalidThreadId):
        await thread_owners.create(backend.pool, legacy, "alice")
    spaced = f"project notes {uuid.uuid4().hex[:6]}"
    assert await thread_owners.claim_ownership(backend.pool, spaced, "alice") == "alice"


async def test_a_keys_label_that_would_garble_its_listing_is_refused(backend):
    """A label's newline forged a row of `keys list`; a 100,000-character label was stored."""
    from storage import api_keys

    for label in ("line1\nFAKEPFX   evil   2026-01-01 00:00", "x" * 100_000, "bell\x07"):
        with pytest.raises(ValueError, match="invalid key label"):
            await api_keys.create_key(backend.pool, "alice", label)
    assert await api_keys.create_key(backend.pool, "alice", "laptop")
