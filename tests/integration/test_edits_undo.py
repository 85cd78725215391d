"""Edits and regenerations undo what the abandoned branch taught (retracted, history kept)."""

from __future__ import annotations

import uuid

from core.schemas import ExtractionResult, NewFact, TaskUpdate
from memory.writer.extraction import apply_extraction, retract_taught_by
from memory.user_memory import list_facts, stored_tasks


async def test_retracting_a_message_retracts_only_what_it_alone_taught(backend):
    user = f"undo-{uuid.uuid4().hex[:8]}"
    taught = ExtractionResult(
        new_facts=[NewFact(text="Is travelling to Peru in May"), NewFact(text="Has a sister in Lyon")],
        task_updates=[TaskUpdate(action="add", description="Renew my passport next week")],
    )
    await apply_extraction(backend.store, user, taught, message_id="m1")
    # Said again by a later message that stays: that fact no longer rests on m1 alone.
    await apply_extraction(backend.store, user, ExtractionResult(new_facts=[NewFact(text="Has a sister in Lyon")]), message_id="m2")

    done = await retract_taught_by(backend.store, user, ["m1"])
    assert done.facts == ["Is travelling to Peru in May"] and done.tasks == ["Renew my passport next week"]
    assert [f.text for f in await list_facts(backend.store, user)] == ["Has a sister in Lyon"]
    history = {f.text: f.status for f in await list_facts(backend.store, user, include_superseded=True)}
    assert history["Is travelling to Peru in May"] == "superseded"  # kept, not deleted
    assert await stored_tasks(backend.store, user) == [] and await stored_tasks(backend.store, user, newest=10) == []
    assert await retract_taught_by(backend.store, user, ["m1"]) == type(done)()  # idempotent


async def test_the_passport_edit_ends_with_one_task(backend):
    """"renew my passport next week" edited to "…tomorrow": the old branch's task goes, one task stays."""
    user = f"undo-{uuid.uuid4().hex[:8]}"
    await apply_extraction(
        backend.store, user, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Renew my passport next week")]), message_id="old"
    )
    await retract_taught_by(backend.store, user, ["old"])
    await apply_extraction(
        backend.store, user, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Renew my passport tomorrow")]), message_id="new"
    )
    assert [t.description for t in await stored_tasks(backend.store, user)] == ["Renew my passport tomorrow"]
