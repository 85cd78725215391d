"""User B never sees user A's facts, tasks, chats or summaries: not in the prompt, the store, the tools or the extractor.

B's id is also tried with LIKE wildcards ('_', '%') and as a prefix of A's id, the
shapes that would leak through a careless namespace prefix match.
"""

from __future__ import annotations

import json
import uuid

import pytest

from memory.chat_admin import forget_user_everywhere
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import prompts
from prompts.reply_prompt import user_words
from graph.assembly import compile_graph
from core.context import Context
from llm.chat_model import register_model, unregister_model
from memory.writer.extraction import apply_extraction
from core.schemas import ExtractionResult, SummaryBoard, TaskUpdate
from memory.user_memory import (
    get_chat,
    get_user_document,
    list_chats,
    list_facts,
    stored_tasks,
    search_chat_summaries,
    search_facts,
    search_tasks,
)
from tests.support.graph_turns import new_thread
from tests.support.scripted_model import ScriptedChatModel, empty_extraction

A_SECRETS = ("Tiberias", "codename", "Nightingale", "dentist")  # words only A ever used
A_SAYS = [
    "I'm Avital and I live in Tiberias.",
    "My project codename is Nightingale.",
    "I must book the dentist.",
    "Nightingale ships in May.",
]
A_EXTRACTIONS = {
    "I'm Avital and I live in Tiberias.": {"new_facts": [{"text": "Lives in Tiberias", "importance": "high"}], "profile_updates": {"location": "Tiberias", "name": "Avital"}},
    "My project codename is Nightingale.": {"new_facts": [{"text": "Works on a project with codename Nightingale"}]},
    "I must book the dentist.": {"task_updates": [{"action": "add", "description": "Book the dentist"}]},
}
B_ASKS = "What do you know about my project and where I live?"


def recorded_responder(a_thread: dict):
    def responder(kind, messages):
        if kind == "extract":
            said = prompts.between(str(messages[-1].content), prompts.USER_MESSAGE_TAG)
            return {**empty_extraction(), **A_EXTRACTIONS.get(said, {})}
        if kind == "fold":
            return SummaryBoard(
                summary="Avital from Tiberias talked about project Nightingale (codename) and the dentist.",
                entities=["Tiberias", "Nightingale"],
                topics=["project Nightingale"],
            ).model_dump()
        if kind == "title":
            return {"title": "Project Nightingale codename"}
        last = messages[-1]
        if isinstance(last, HumanMessage) and user_words(last) == B_ASKS:
            # B's model tries every way in: facts, tasks, history, and A's chat by id.
            calls = [
                ("recall_context", {"context_type": "facts"}),
                ("recall_context", {"context_type": "tasks"}),
                ("recall_context", {"context_type": "entities"}),
                ("search_conversation_history", {"query": "Nightingale codename Tiberias dentist"}),
                ("get_conversation_summary", {"chat_id": a_thread["configurable"]["thread_id"]}),
                ("get_conversation_summary", {}),
            ]
            return AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"} for i, (n, a) in enumerate(calls)])
        return "Understood."

    return responder


@pytest.fixture
def scripted():
    holder: dict = {}
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    model = ScriptedChatModel(responder=lambda kind, messages: holder["responder"](kind, messages))
    register_model(name, model)
    yield name, model, holder
    unregister_model(name)


def leaked(text: str, a_thread_id: str) -> list[str]:
    return [s for s in (*A_SECRETS, a_thread_id) if s.casefold() in text.casefold()]


@pytest.mark.slow
@pytest.mark.parametrize("b_shape", ["fresh", "prefix_of_a", "like_underscore", "like_percent"])
async def test_user_b_never_sees_user_a(backend, user_id, scripted, b_shape):
    name, model, holder = scripted
    a = user_id
    b = {
        "fresh": f"b{uuid.uuid4().hex[:12]}",
        "prefix_of_a": a[:-2],
        "like_underscore": a[:-1] + "_",
        "like_percent": a[:-3] + "%",
    }[b_shape]
    graph = compile_graph(backend.checkpointer, backend.store)
    a_thread, b_thread = new_thread(), new_thread()
    holder["responder"] = recorded_responder(a_thread)

    # --- A builds up memory: facts, profile, a task (by extraction), a chat with a fold and a title.
    a_ctx = Context(user_id=a, model=name, summary_window=4, tail_size=2)
    for text in A_SAYS:
        await graph.ainvoke({"messages": [HumanMessage(text)]}, a_thread, context=a_ctx)
    await apply_extraction(backend.store, a, ExtractionResult(task_updates=[TaskUpdate(action="add", description="Ship Nightingale")]))
    assert len(await list_facts(backend.store, a)) == 2 and len(await stored_tasks(backend.store, a)) == 2
    a_chat = await get_chat(backend.store, a, a_thread["configurable"]["thread_id"])
    assert "Nightingale" in a_chat.summary_text and "Nightingale" in a_chat.title
    a_thread_id = a_thread["configurable"]["thread_id"]

    # --- B asks, and its model calls every memory tool, including A's chat by id.
    model.calls.clear()
    b_ctx = Context(user_id=b, model=name)
    out = await graph.ainvoke({"messages": [HumanMessage(B_ASKS)]}, b_thread, context=b_ctx)

    loaded = out["loaded_context"]
    assert loaded["facts"] == [] and loaded["tasks"] == [] and loaded["related_chats"] == []
    assert not any(v for v in loaded["profile"].values())
    for kind, messages in model.calls:
        current = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        prompt = f"{messages[0].content}\n{current.content if current else ''}"  # the system message and what the message brought
        assert leaked(prompt, a_thread_id) == [], (kind, prompt)
        if kind == "extract":
            stored = json.loads(prompts.between(str(messages[-1].content), prompts.STORED_MEMORIES_TAG))
            assert stored["facts"] == [] and stored["tasks"] == [] and not stored["profile"]
    tool_results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_results) == 6
    for result in tool_results:
        assert leaked(result.content, "(id named by B itself)") == [], result.content
    assert any(f"No chat '{a_thread_id}' among this user's chats" in r.content for r in tool_results)  # B's own guess, echoed

    # --- the store, read as B
    assert await list_facts(backend.store, b, include_superseded=True) == []
    assert await search_facts(backend.store, b, "Tiberias Nightingale codename", limit=10) == []
    assert await stored_tasks(backend.store, b) == []
    assert await search_tasks(backend.store, b, "dentist", limit=10) == []
    b_thread_id = b_thread["configurable"]["thread_id"]
    assert [c.thread_id for c, _ in await search_chat_summaries(backend.store, b, "project Nightingale", limit=10)] == [b_thread_id]
    assert await get_chat(backend.store, b, a_thread_id) is None
    assert [c.thread_id for c in await list_chats(backend.store, b)] == [b_thread_id]
    assert (await get_user_document(backend.store, b)).profile.name is None

    # --- forgetting B removes nothing of A's
    await forget_user_everywhere(backend, b)
    assert len(await list_facts(backend.store, a)) == 2 and len(await stored_tasks(backend.store, a)) == 2
    assert await get_chat(backend.store, a, a_thread_id) is not None
    assert (await get_user_document(backend.store, a)).profile.name == "Avital"


async def test_invalid_user_ids_are_refused_before_touching_the_store(backend):
    from core.namespaces import facts_ns

    for bad in ("", "a.b", "a/b"):
        with pytest.raises(ValueError, match="invalid user id"):
            facts_ns(bad)
