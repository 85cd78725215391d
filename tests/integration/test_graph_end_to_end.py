"""The compiled graph on real Postgres, with a scripted chat model."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage

from memory.user_memory import get_user_document, list_facts
from tests.support.graph_turns import chat_on, new_thread
from tests.support.scripted_model import empty_extraction, plain_answers, registered_scripted_model

EXTRACTIONS = {
    "My name is Dana.": {**empty_extraction(), "profile_updates": {"name": "Dana"}},
    "I live in Haifa and I work as a nurse.": {
        **empty_extraction(),
        "profile_updates": {"location": "Haifa", "role": "nurse"},
        "new_facts": [{"text": "Lives in Haifa", "importance": "high"}, {"text": "Works as a nurse", "importance": "high"}],
    },
    "I have a dog named Rex.": {**empty_extraction(), "new_facts": [{"text": "Has a dog named Rex", "importance": "medium"}]},
}


responder = plain_answers(
    extract=lambda said: EXTRACTIONS.get(said, empty_extraction()), title="About Dana", summary="Dana introduced herself.", reply="Noted."
)


@pytest.fixture
def scripted():
    with registered_scripted_model(responder) as scripted:
        yield scripted


@pytest.mark.slow
async def test_facts_stated_over_turns_are_stored_and_reach_a_later_prompt(backend, user_id, scripted):
    name, model = scripted
    graph, ctx, config = chat_on(backend, user_id, name)
    for text in EXTRACTIONS:
        await graph.ainvoke({"messages": [HumanMessage(text)]}, config, context=ctx)

    facts = {f.text for f in await list_facts(backend.store, user_id)}
    assert facts == {"Lives in Haifa", "Works as a nurse", "Has a dog named Rex"}
    doc = await get_user_document(backend.store, user_id)
    assert (doc.profile.name, doc.profile.location, doc.profile.role) == ("Dana", "Haifa", "nurse")

    # A new chat of the same user: the prompt carries what the earlier chat taught.
    other = new_thread()
    await graph.ainvoke({"messages": [HumanMessage("What do you know about my pets?")]}, other, context=ctx)
    prompt = model.calls_of("reply")[-1]
    # The profile opens the current message with the rest found for it: the system message stays the same as it grows.
    assert "name: Dana" not in prompt[0].content and "## User context\n" in prompt[-1].content
    for expected in ("name: Dana", "location: Haifa", "Has a dog named Rex"):
        assert expected in "\n".join(m.text for m in prompt)


async def test_graph_runs_with_no_context_given(backend):
    """runtime.context is None when the caller passes none: the defaults apply (offline model, user 'local')."""
    graph, _, config = chat_on(backend, "local", "offline")
    out = await graph.ainvoke({"messages": [HumanMessage("hello there")]}, config)
    assert out["messages"][-1].content.startswith("(offline model)")


@pytest.mark.slow
async def test_an_unrelated_turn_gets_no_knowledge_and_a_related_one_does(backend, user_id, scripted):
    from pathlib import Path

    import knowledge
    from prompts.reply_prompt import KNOWLEDGE_HEADER, parse_sections

    name, model = scripted
    collection = f"kb-{uuid.uuid4().hex[:8]}"
    report = await knowledge.ingest(backend.pool, backend.embeddings.embeddings, [Path(__file__).parents[1] / "fixtures" / "kb"], collection)
    assert report.ok, report.summary()
    graph, ctx, config = chat_on(backend, user_id, name, rag_collection=collection)

    def knowledge_section() -> str:
        return parse_sections([call for kind, call in model.calls if kind == "reply"][-1]).get(KNOWLEDGE_HEADER, "")

    state = await graph.ainvoke({"messages": [HumanMessage("I'm hungry, any ideas for dinner?")]}, config, context=ctx)
    assert state["retrieved_chunks"] == [] and knowledge_section() == ""  # no section: nothing was found

    state = await graph.ainvoke({"messages": [HumanMessage("The hub's status light stays dark and it won't turn on")]}, config, context=ctx)
    assert state["retrieved_chunks"][0]["heading_path"].endswith("The hub does not power on")
    assert "XR-2291-B" in knowledge_section()


@pytest.mark.slow
async def test_a_collection_named_with_spaces_is_searched_as_ingest_named_it_and_an_empty_one_is_said_once(backend, user_id, scripted, caplog):
    """rag_collection "kb-x " found nothing ("kb-x" ingested), and a misspelt one gave no knowledge, silently."""
    from pathlib import Path

    import knowledge

    name, _ = scripted
    collection = f"kb-{uuid.uuid4().hex[:8]}"
    report = await knowledge.ingest(backend.pool, backend.embeddings.embeddings, [Path(__file__).parents[1] / "fixtures" / "kb"], f" {collection} ")
    assert report.ok, report.summary()
    question = {"messages": [HumanMessage("The hub's status light stays dark and it won't turn on")]}

    graph, ctx, config = chat_on(backend, user_id, name, rag_collection=f"{collection} ")
    state = await graph.ainvoke(question, config, context=ctx)
    assert state["retrieved_chunks"][0]["heading_path"].endswith("The hub does not power on")

    misspelt = f"{collection}-typo"
    graph, ctx, config = chat_on(backend, user_id, name, rag_collection=misspelt)
    for _ in range(2):
        state = await graph.ainvoke(question, config, context=ctx)
        assert state["retrieved_chunks"] == []
    said = [r.getMessage() for r in caplog.records if "holds no documents" in r.getMessage()]
    assert len(said) == 1 and misspelt in said[0] and collection in said[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("said", "retracted", "field", "value", "cleared"),
    [
        ("I live in Rome.", "I no longer live in Rome.", "location", "Rome", "location cleared (was Rome)"),
        ({"location": "Rome, Italy"}, "I don't live in Rome anymore.", "location", "Rome, Italy", "location cleared (was Rome, Italy)"),
        ("I'm a nurse.", "I'm not a nurse anymore.", "role", "nurse", "role cleared (was nurse)"),
        ("I work as a nurse.", "I stopped working as a nurse.", "role", "nurse", "role cleared (was nurse)"),
    ],
)
async def test_a_profile_value_the_user_says_no_longer_holds_is_cleared_and_the_turn_says_so(backend, user_id, said, retracted, field, value, cleared):
    """'I no longer live in Rome' learned nothing: location Rome stayed in the profile every prompt shows."""
    from memory.writer.edits import edit_user_document

    graph, ctx, config = chat_on(backend, user_id, "offline")
    if isinstance(said, dict):  # typed into the profile by the user
        await edit_user_document(backend.store, user_id, "profile", said)
    else:
        await graph.ainvoke({"messages": [HumanMessage(said)]}, config, context=ctx)
    assert getattr((await get_user_document(backend.store, user_id)).profile, field) == value

    out = await graph.ainvoke({"messages": [HumanMessage(retracted)]}, config, context=ctx)
    doc = await get_user_document(backend.store, user_id)
    assert getattr(doc.profile, field) is None
    assert f"profile.{field}" not in doc.sources  # no history left for a value the profile no longer has
    assert out["memory_written"]["profile_changes"][field] is None
    assert cleared in out["memory_written"]["described"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("said", "retracted", "old", "new"),
    [
        ("I live in Rome.", "I no longer live in Rome.", "Lives in Rome", "No longer lives in Rome"),
        ("I'm a nurse.", "I'm not a nurse anymore.", "Works as a nurse", "No longer works as a nurse"),
    ],
)
async def test_the_fact_a_retraction_contradicts_is_superseded_and_no_longer_shown(backend, user_id, said, retracted, old, new):
    """After 'I no longer live in Rome' the fact 'Lives in Rome' stayed active, in every prompt."""
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage(said)]}, config, context=ctx)
    out = await graph.ainvoke({"messages": [HumanMessage(retracted)]}, config, context=ctx)
    assert out["memory_written"]["facts_superseded"] == [{"old": old, "new": new}]
    assert [f.text for f in await list_facts(backend.store, user_id)] == [new]


@pytest.mark.slow
@pytest.mark.parametrize(
    "other",
    ["I no longer live in Rome? No, I still do.", "Do I still live in Rome?", "My sister no longer lives in Rome.", "If I no longer lived in Rome, I'd miss it.",
     "I no longer live in Milan."],
)
async def test_a_question_another_person_or_another_city_clears_nothing(backend, user_id, other):
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage("I live in Rome.")]}, config, context=ctx)
    out = await graph.ainvoke({"messages": [HumanMessage(other)]}, config, context=ctx)
    assert (await get_user_document(backend.store, user_id)).profile.location == "Rome"
    assert "location" not in (out["memory_written"].get("profile_changes") or {})
