"""A reindex lists every item, then puts each again; the app may serve meanwhile. What a forget
deleted or changed after the list was read must not come back as the list had it."""

from __future__ import annotations

import uuid

from core.schemas import ExtractionResult, NewFact
from memory.user_memory import list_facts, search_facts
from memory.writer.edits import delete_item, edit_fact
from memory.writer.extraction import apply_extraction
from memory.writer.records import forget_user_memory, reembed_items
from storage import store_rows


async def _listed(backend, *users: str):
    """What the reindex reads first: every item's key (here only these users', so tests sharing the database stay apart)."""
    return [item for item in await store_rows.all_keys(backend.pool) if item[0][1] in users]


async def test_items_listed_before_a_forget_me_are_not_put_back_by_the_reindex(backend, user_id):
    other = f"u{uuid.uuid4().hex[:12]}"
    await apply_extraction(backend.store, user_id, ExtractionResult(new_facts=[NewFact(text="Works as a nurse in Coimbra")]))
    await apply_extraction(backend.store, other, ExtractionResult(new_facts=[NewFact(text="Plays the cello")]))
    listed = await _listed(backend, user_id, other)

    await forget_user_memory(backend.pool, user_id)
    put = await reembed_items(backend.store, listed)

    assert await list_facts(backend.store, user_id, include_superseded=True) == []
    assert [item for item in await store_rows.all_keys(backend.pool) if item[0][1] == user_id] == []
    # Everyone else's items are put again, and found by meaning with the vectors made now.
    assert put == len([item for item in listed if item[0][1] == other])
    hits = await search_facts(backend.store, other, "musical instrument")
    assert hits and hits[0][0].text == "Plays the cello"


async def test_a_fact_deleted_or_corrected_after_the_list_keeps_its_forget_through_the_reindex(backend, user_id):
    await apply_extraction(
        backend.store, user_id,
        ExtractionResult(new_facts=[NewFact(text="Works as a nurse in Coimbra"), NewFact(text="Lives with a parrot named Kiwi")]),
    )
    facts = {f.text: f for f in await list_facts(backend.store, user_id)}
    listed = await _listed(backend, user_id)

    assert await delete_item(backend.store, user_id, "facts", facts["Works as a nurse in Coimbra"].id)
    await edit_fact(backend.store, user_id, facts["Lives with a parrot named Kiwi"].id, text="Lives with a parrot")
    await reembed_items(backend.store, listed)

    assert [f.text for f in await list_facts(backend.store, user_id, include_superseded=True)] == ["Lives with a parrot"]
    hits = await search_facts(backend.store, user_id, "pet bird")
    assert hits and hits[0][0].text == "Lives with a parrot"
