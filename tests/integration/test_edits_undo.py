"""Edits and regenerations undo what the abandoned branch taught (retracted, history kept)."""

from __future__ import annotations

import uuid

from core.schemas import ExtractionResult, NewFact, TaskUpdate
from memory.writer.extraction import apply_extraction, retract_taught_by
from memory.user_memory import get_task, list_facts, stored_tasks
from memory.writer.edits import edit_task


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


async def test_a_retracted_task_cannot_be_edited_back_into_the_list(backend):
    """A task the edit took back is listed nowhere, but a PATCH from a list shown before the edit
    (`edit_task`) changed it, and as "done" it was listed again: what the abandoned branch taught came back."""
    user = f"undo-{uuid.uuid4().hex[:8]}"
    await apply_extraction(
        backend.store, user, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Renew my passport next week")]), message_id="old"
    )
    (task,) = await stored_tasks(backend.store, user)
    await retract_taught_by(backend.store, user, ["old"])
    assert await edit_task(backend.store, user, task.id, {"status": "done", "due": "Friday"}) is None  # the route's 404
    assert await stored_tasks(backend.store, user) == [] and (await get_task(backend.store, user, task.id)).status == "retracted"
