"""Items written around the agent (the LangGraph store API lets a client put any JSON in its
own namespaces) that do not match their schema: every reader skips them, they are logged
and counted once, the memory views list them, and they can be deleted. A turn never fails
because of one."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import uuid

import pytest

from app.cli.chat_session import ChatSession
from app.cli.memory_report import memory_snapshot, render_snapshot
from core.context import Context
from core.namespaces import PROFILE_KEY, chats_ns, facts_ns, profile_ns, tasks_ns
from core.schemas import Fact
from graph.assembly import compile_graph
from memory import queries
from memory.forgetting import forget_request
from memory.writer.edits import delete_invalid as delete_invalid_item
from memory.user_memory import (
    get_user_document,
    invalid_items,
    list_chats,
    list_facts,
    stored_tasks,
    search_facts,
)
from tests.conftest import REPO_ROOT
from tests.support.graph_turns import metric, new_thread, stream_turn
from tests.support.scripted_model import empty_extraction, registered_scripted_model

INVALID = "memory_agent_invalid_items_total"
BAD_FACT = {"text": "x", "status": "active"}  # no id: not a Fact
BAD_TASK = {"description": "water the plants", "status": "someday"}  # no id, unknown status
BAD_PROFILE = {"profile": {"name": ["not", "a", "name"]}, "preferences": {"answer_length": "endless"}}
BAD_CHAT = {"title": "forged", "summary_text": "a chat about plants"}  # no thread_id


async def poison(store, user_id: str) -> None:
    """Write one invalid item of each kind the way a store API client would (facts embedded)."""
    await store.aput(facts_ns(user_id), "poison-fact", BAD_FACT)
    await store.aput(tasks_ns(user_id), "poison-task", BAD_TASK)
    await store.aput(profile_ns(user_id), PROFILE_KEY, BAD_PROFILE, index=False)
    await store.aput(chats_ns(user_id), "poison-chat", BAD_CHAT)


def counts() -> dict[str, float]:
    return {kind: metric(INVALID, {"kind": kind}) for kind in ("profile", "facts", "tasks", "chats")}


EXTRACTION = {
    **empty_extraction(),
    "new_facts": [{"text": "Grows tomatoes on the balcony", "importance": "medium"}],
    "profile_updates": {"name": "Dana"},
    "task_updates": [{"action": "add", "description": "Buy tomato stakes"}],
}


def responder(kind, messages):
    if kind == "extract":
        body = str(messages[-1].content)
        return EXTRACTION if "tomatoes" in body else empty_extraction()
    if kind == "title":
        return {"title": "Balcony garden"}
    if kind == "fold":
        return {"summary": "Dana talked about her garden."}
    return "Got it!"


@pytest.fixture
def scripted():
    with registered_scripted_model(responder) as (name, _):
        yield name


@pytest.mark.slow
async def test_turns_succeed_and_write_memory_over_invalid_items_counted_and_logged_once(backend, user_id, scripted, caplog):
    await poison(backend.store, user_id)
    before = counts()
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=scripted)
    config = new_thread()

    with caplog.at_level(logging.WARNING, logger="memory.user_memory"):
        first = await stream_turn(graph, "My name is Dana and I grow tomatoes on the balcony.", config, ctx)
        second = await stream_turn(graph, "What should I plant next to the tomatoes?", config, ctx)

    for turn in (first, second):
        assert turn.final_reply is not None and turn.final_reply.content == "Got it!"
        assert not turn.values.get("error")
    # The turn's memory update ran over the poisoned namespaces.
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Grows tomatoes on the balcony"]
    assert [t.description for t in await stored_tasks(backend.store, user_id)] == ["Buy tomato stakes"]
    assert (await get_user_document(backend.store, user_id)).profile.name == "Dana"  # the invalid document was replaced
    assert all(f.id != "poison-fact" for f, _ in await search_facts(backend.store, user_id, "x"))

    # Read many times over two turns, each invalid item is counted and logged once.
    after = counts()
    assert {k: after[k] - before[k] for k in after} == {"profile": 1, "facts": 1, "tasks": 1, "chats": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for key in ("'poison-fact'", "'poison-task'", "'poison-chat'"):
        assert sum(key in w for w in warnings) == 1, warnings
    assert any("id: Field required" in w for w in warnings)


async def test_the_agents_read_tools_skip_invalid_items(backend, user_id):
    await poison(backend.store, user_id)
    await backend.store.aput(facts_ns(user_id), "f1", Fact(id="f1", text="Keeps bees").model_dump(mode="json"))

    recalled = await queries.recall_context(backend.store, None, user_id, "facts")
    assert [i.text for i in recalled.items] == ["Keeps bees"]
    assert (await queries.list_tasks(backend.store, user_id)).count == 0
    assert (await queries.search_chats(backend.store, user_id, "")).chats == []
    assert (await queries.search_conversation_history(backend.store, None, user_id, "plants")).summaries == []
    with pytest.raises(queries.ChatNotFound):
        await queries.get_conversation_summary(backend.store, None, user_id, "poison-chat")
    assert await list_chats(backend.store, user_id) == []


async def test_an_item_whose_id_is_not_its_key_is_invalid(backend, user_id):
    stray = Fact(id="someone-else", text="Likes tea").model_dump(mode="json")
    await backend.store.aput(facts_ns(user_id), "stray", stray)
    assert await list_facts(backend.store, user_id) == []
    (item,) = await invalid_items(backend.store, user_id)
    assert (item.kind, item.key) == ("facts", "stray")
    assert "'someone-else' is not the item's key 'stray'" in item.error


async def test_memory_views_list_invalid_items_with_key_and_error_and_they_can_be_deleted(backend, user_id):
    await poison(backend.store, user_id)
    await backend.store.aput(facts_ns(user_id), "f1", Fact(id="f1", text="Keeps bees").model_dump(mode="json"))

    snap = await memory_snapshot(backend.store, user_id)
    assert [f["text"] for f in snap["facts"]] == ["Keeps bees"]
    listed = {(i["kind"], i["key"]): i for i in snap["invalid"]}
    assert set(listed) == {("profile", "profile"), ("facts", "poison-fact"), ("tasks", "poison-task"), ("chats", "poison-chat")}
    assert listed[("facts", "poison-fact")]["value"] == BAD_FACT
    assert "status: Input should be 'open', 'in_progress', 'done' or 'retracted'" in listed[("tasks", "poison-task")]["error"]
    text = render_snapshot(snap)
    assert "Invalid items (4)" in text and "facts poison-fact: id: Field required" in text

    # The chat's /memory shows the same.
    err = io.StringIO()
    session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, err=err)
    await session.command("/memory")
    assert "tasks poison-task:" in err.getvalue()

    with pytest.raises(ValueError, match="is valid"):
        await delete_invalid_item(backend.store, user_id, "facts", "f1")
    assert await delete_invalid_item(backend.store, user_id, "chats", "poison-chat") is True
    assert await delete_invalid_item(backend.store, user_id, "chats", "poison-chat") is False
    assert {i.key for i in await invalid_items(backend.store, user_id)} == {"profile", "poison-fact", "poison-task"}


def run_cli(args: list[str], database_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=180)


@pytest.mark.slow  # CLI processes
async def test_cli_memory_show_lists_invalid_items_and_delete_invalid_removes_one(backend, user_id):
    await poison(backend.store, user_id)
    await backend.store.aput(facts_ns(user_id), "f1", Fact(id="f1", text="Keeps bees").model_dump(mode="json"))

    shown = run_cli(["memory", "show", "--user", user_id], backend.url)
    assert shown.returncode == 0, shown.stderr
    assert "Keeps bees" in shown.stdout and "facts poison-fact: id: Field required" in shown.stdout
    as_json = json.loads(run_cli(["memory", "show", "--user", user_id, "--json"], backend.url).stdout)
    assert {i["key"] for i in as_json["invalid"]} == {"profile", "poison-fact", "poison-task", "poison-chat"}

    deleted = run_cli(["memory", "delete-invalid", "--user", user_id, "facts", "poison-fact"], backend.url)
    assert deleted.returncode == 0, deleted.stderr
    assert await backend.store.aget(facts_ns(user_id), "poison-fact") is None
    refused = run_cli(["memory", "delete-invalid", "--user", user_id, "facts", "f1"], backend.url)
    assert refused.returncode == 1 and "is valid" in refused.stderr
    assert await backend.store.aget(facts_ns(user_id), "f1") is not None


async def test_a_stored_value_that_is_not_an_object_is_invalid_to_every_reader_and_deletable(backend, user_id):
    from psycopg.types.json import Jsonb

    from memory.writer.edits import delete_invalid

    async with backend.pool.connection() as conn:  # straight into the table: the store's API only writes objects
        for namespace, key, value in (("facts", "list-fact", ["a"]), ("tasks", "text-task", "text"), ("profile", PROFILE_KEY, 7)):
            await conn.execute("INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s)", (f"users.{user_id}.{namespace}", key, Jsonb(value)))
    assert await stored_tasks(backend.store, user_id) == []
    assert (await get_user_document(backend.store, user_id)).profile.name is None
    found = {(i.kind, i.key): i for i in await invalid_items(backend.store, user_id)}
    assert set(found) == {("facts", "list-fact"), ("tasks", "text-task"), ("profile", PROFILE_KEY)}
    assert found[("tasks", "text-task")].error == "the stored value is a JSON string, not an object"
    for kind, key in found:
        assert await delete_invalid(backend.store, user_id, kind, key) is True  # through the writer's transaction too
    assert await invalid_items(backend.store, user_id) == []


async def test_a_forget_deletes_the_invalid_facts_and_tasks_that_carry_its_words(backend, user_id):
    """No reader uses an invalid item, but the memory views list it with its value: a forget of "Porto"
    left "Works at the Porto harbour" there (and an invalid item unrelated to it stays to be deleted)."""
    await backend.store.aput(facts_ns(user_id), "porto-fact", {"text": "Works at the Porto harbour", "importance": "huge"})
    await backend.store.aput(tasks_ns(user_id), "porto-task", {"description": "Book the ferry to Porto", "status": "someday"})
    await backend.store.aput(tasks_ns(user_id), "poison-task", BAD_TASK)
    await backend.store.aput(facts_ns(user_id), "f1", Fact(id="f1", text="Lives in Porto").model_dump(mode="json"))
    report = await forget_request(backend.store, user_id, "Porto")
    assert report is not None and (report.facts, report.tasks) == (2, 1)
    assert [(i.kind, i.key) for i in await invalid_items(backend.store, user_id)] == [("tasks", "poison-task")]


async def test_a_forget_deletes_an_invalid_profile_or_chat_record_that_carries_its_words(backend, user_id):
    """The same for the profile document and a chat's record: a forget of "Porto" left them listed
    with the word (an invalid one unrelated to it stays)."""
    await backend.store.aput(profile_ns(user_id), PROFILE_KEY, {"profile": {"location": "Porto"}, "updated_at": "not a time"})
    await backend.store.aput(chats_ns(user_id), "porto-chat", {"thread_id": "porto-chat", "title": 7, "summary_text": "Moving to Porto"})
    await backend.store.aput(chats_ns(user_id), "other-chat", {"thread_id": "other-chat", "title": 7, "summary_text": "Tea"})
    await backend.store.aput(facts_ns(user_id), "f1", Fact(id="f1", text="Lives in Porto").model_dump(mode="json"))
    assert {(i.kind, i.key) for i in await invalid_items(backend.store, user_id)} == {("profile", PROFILE_KEY), ("chats", "porto-chat"), ("chats", "other-chat")}

    assert await forget_request(backend.store, user_id, "Porto") is not None
    assert [(i.kind, i.key) for i in await invalid_items(backend.store, user_id)] == [("chats", "other-chat")]
    assert "Porto" not in (await get_user_document(backend.store, user_id)).model_dump_json()
