"""The memory writer keeps the blank-value rule itself (core.text_validation.is_blank), so no entry
point can break it: an edit with a blank value is refused before anything is written, and what a
model extracts blank is left out. A real Postgres store; no HTTP."""

from __future__ import annotations

import pytest

from core.schemas import ExtractionResult, Task
from core.namespaces import tasks_ns
from memory.queries import get_user_document, list_facts
from memory.writer.edits import edit_fact, edit_task, edit_user_document
from memory.writer.extraction import apply_extraction, remember_fact

BLANK = ["", "  ", "\u200b\u2060", "\ufeff", "\u00ad", "\u3164"]


async def test_an_edit_with_a_blank_value_is_refused_and_nothing_is_written(backend, user_id):
    store = backend.store
    await edit_user_document(store, user_id, "profile", {"name": "Dana", "goals": ["ski"]})
    await edit_user_document(store, user_id, "preferences", {"tone": "warm"})
    for blank in BLANK:
        with pytest.raises(ValueError):
            await edit_user_document(store, user_id, "profile", {"location": "Haifa", "name": blank})
        with pytest.raises(ValueError):
            await edit_user_document(store, user_id, "profile", {"goals": ["ski", blank]})
        with pytest.raises(ValueError):
            await edit_user_document(store, user_id, "preferences", {"other_notes": [blank]})
    doc = await get_user_document(store, user_id)
    assert (doc.profile.name, doc.profile.location, doc.profile.goals, doc.preferences.other_notes) == ("Dana", None, ["ski"], [])
    cleared = await edit_user_document(store, user_id, "profile", {"name": None})  # None clears a field
    assert cleared.name is None


async def test_a_blank_due_date_description_or_fact_text_is_refused_by_the_writer(backend, user_id):
    store = backend.store
    task = Task(id="t1", description="Renew my passport", due="Friday")
    await store.aput(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=False)
    await apply_extraction(store, user_id, ExtractionResult.model_validate({"new_facts": [{"text": "Has a dog named Rex"}]}))
    (fact,) = await list_facts(store, user_id)
    for blank in BLANK:
        with pytest.raises(ValueError):
            await edit_task(store, user_id, "t1", {"due": blank})
        with pytest.raises(ValueError):
            await edit_task(store, user_id, "t1", {"description": blank})
        with pytest.raises(ValueError):
            await edit_fact(store, user_id, fact.id, text=blank)
        with pytest.raises(ValueError):
            await remember_fact(store, user_id, blank)  # MCP's remember
    stored = Task.model_validate((await store.aget(tasks_ns(user_id), "t1")).value)
    assert (stored.description, stored.due) == ("Renew my passport", "Friday")
    assert [f.text for f in await list_facts(store, user_id)] == ["Has a dog named Rex"]


async def test_blank_values_a_model_extracts_are_left_out(backend, user_id):
    reply = {
        "profile_updates": {"name": "\u200b", "location": "Haifa", "goals": ["\u3164", "  ", "learn Italian"]},
        "new_preferences": {"tone": "\ufeff", "other_notes": ["\u00ad"]},
        "task_updates": [{"action": "add", "description": "Renew my passport", "due": " \u2060 "}],
    }
    report = await apply_extraction(backend.store, user_id, ExtractionResult.model_validate(reply))
    doc = await get_user_document(backend.store, user_id)
    assert doc.profile.model_dump() == {
        "name": None, "native_language": None, "level": None, "role": None, "location": "Haifa", "goals": ["learn Italian"],
    }
    assert doc.preferences.tone is None and doc.preferences.other_notes == []
    assert report.tasks_added == ["Renew my passport"]
    (item,) = await backend.store.asearch(tasks_ns(user_id))
    assert item.value["due"] is None


async def test_an_edit_through_the_writer_is_held_to_the_models_limits_whoever_calls(backend, user_id):
    # The HTTP API checks its body; the writer did not, so a Python caller stored a 5,000-character
    # description, a status no code knows, a hundred tags or an unknown field, unchecked.
    store = backend.store
    task = Task(id="t1", description="Renew my passport", due="Friday")
    await store.aput(tasks_ns(user_id), task.id, task.model_dump(mode="json"), index=False)
    await apply_extraction(store, user_id, ExtractionResult.model_validate({"new_facts": [{"text": "Has a dog named Rex"}]}))
    (fact,) = await list_facts(store, user_id)
    refused_task_edits = [
        {"description": "Renew my passport " * 300},
        {"status": "someday"},
        {"due": "Friday " * 100},
        {"priority": "high"},
        {"description": "Renew my passport and visa", "status": "sometime"},
    ]
    for changes in refused_task_edits:
        with pytest.raises(ValueError):
            await edit_task(store, user_id, "t1", changes)
    refused_fact_edits = [
        {"text": "Has a dog named Rex " * 300},
        {"importance": "urgent"},
        {"tags": [f"tag{i}" for i in range(100)]},
        {"tags": ["x" * 500]},
        {"text": "Has a dog named Max", "importance": "urgent"},
    ]
    for changes in refused_fact_edits:
        with pytest.raises(ValueError):
            await edit_fact(store, user_id, fact.id, **changes)
    stored = Task.model_validate((await store.aget(tasks_ns(user_id), "t1")).value)
    assert (stored.description, stored.status, stored.due) == ("Renew my passport", "open", "Friday")
    (kept,) = await list_facts(store, user_id)
    assert (kept.text, kept.importance, kept.tags) == ("Has a dog named Rex", fact.importance, fact.tags)

    edited = await edit_fact(store, user_id, fact.id, tags=[" pets ", "pets", "dog"] + ["dog"] * 40, importance="high")
    assert (edited.tags, edited.importance) == (["dog", "pets"], "high")  # each tag once, then the limit
    done = await edit_task(store, user_id, "t1", {"status": "done", "description": "  Renew my passport at the consulate "})
    assert (done.status, done.description) == ("done", "Renew my passport at the consulate")


async def test_a_fact_edited_into_another_active_facts_words_takes_it_in_and_an_empty_edit_changes_nothing(backend, user_id):
    """The edit left two identical facts, both shown to the model; an empty PATCH moved updated_at."""
    store = backend.store
    await apply_extraction(store, user_id, ExtractionResult.model_validate({"new_facts": [{"text": "Has a dog named Rex"}, {"text": "Has a cat named Tom"}]}))
    facts = {f.text: f for f in await list_facts(store, user_id)}
    rex, tom = facts["Has a dog named Rex"], facts["Has a cat named Tom"]

    assert (await edit_fact(store, user_id, rex.id)).updated_at == rex.updated_at
    edited = await edit_fact(store, user_id, tom.id, text="Has a dog named Rex")

    assert [f.id for f in await list_facts(store, user_id)] == [tom.id] and edited.mentions == 2
    [old] = [f for f in await list_facts(store, user_id, include_superseded=True) if f.id == rex.id]
    assert (old.status, old.superseded_by) == ("superseded", tom.id)
