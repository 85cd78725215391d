"""Work a request does on a chat without launching a run (deleting a message, deleting the chat)
holds the chat's run slot only while it works: the next message is taken at once, whether the
work succeeded or failed (real Postgres, routes called in-process)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from app.http.errors import ApiError
from app.http.routes_chats import delete_message_outright, holding_chat
from app.http.services import Services
from app.runs.active_runs import ActiveRuns
from core.schemas import ChatRecord
from core.state import LAST_NODE
from graph.assembly import compile_graph
from storage import chat_runs, thread_owners


@pytest.fixture
async def chat(backend, user_id):
    """A chat of two messages, written straight into its state (no turn runs), and the app's services."""
    graph = compile_graph(backend.checkpointer, backend.store)
    services = Services(backend, graph, ActiveRuns(graph, backend.pool), auth_enabled=False, max_message_chars=10_000)
    record = ChatRecord(thread_id=str(uuid.uuid4()), title="Porto")
    await thread_owners.create(backend.pool, record.thread_id, user_id)
    said = [HumanMessage("My sister lives in Porto", id=str(uuid.uuid4())), AIMessage("Noted.", id=str(uuid.uuid4()))]
    await graph.aupdate_state({"configurable": {"thread_id": record.thread_id}}, {"messages": said}, as_node=LAST_NODE)
    yield services, record, said
    await services.runs.close()


async def next_message_is_taken(services: Services, record: ChatRecord, user_id: str) -> None:
    assert await chat_runs.active_run(services.backend.pool, record.thread_id) is None
    run_id = await services.runs.claim_run_slot(record.thread_id, user_id, "message")  # RunInProgress if still held
    await chat_runs.finish(services.backend.pool, run_id, "released")


async def test_deleting_a_message_outright_leaves_the_chat_free_for_the_next_message(chat, user_id):
    """DELETE /chats/{id}/messages/{mid} answered 200, then every message was 409 reply_in_progress for ~15 s."""
    services, record, said = chat
    assert (await delete_message_outright(said[0].id, record, user_id, services)).deleted == {"messages": 1}
    await next_message_is_taken(services, record, user_id)


async def test_a_deletion_that_fails_leaves_the_chat_free_too(chat, user_id):
    services, record, _ = chat
    with pytest.raises(ApiError) as refused:
        await delete_message_outright("no-such-message", record, user_id, services)
    assert refused.value.status == 404
    await next_message_is_taken(services, record, user_id)


async def test_a_chat_held_for_a_deletion_refuses_a_message_and_is_heartbeated_until_it_is_released(chat, user_id):
    services, record, _ = chat
    async with holding_chat(services, record.thread_id, user_id, "delete") as run_id:
        with pytest.raises(chat_runs.RunInProgress):
            await chat_runs.start_run(services.backend.pool, record.thread_id, user_id, "message", "another-worker")
        assert run_id in services.runs._beats()  # no worker takes a long deletion for a dead worker's run
    assert run_id not in services.runs._beats()
    await next_message_is_taken(services, record, user_id)
