"""Text Postgres cannot store (a NUL, a lone surrogate) that reaches a thread's state past the reducers
of core.state (an ``Overwrite`` of the messages) or a run's row (a model's streamed reply): the
thread goes on, and what was derived from it is stored with U+FFFD or refused clearly."""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import dict_row
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Overwrite

from core.state import LAST_NODE
from memory import episodes
from storage import api_keys, chat_runs
from tests.support.in_process_app import client_of, in_process_app


@pytest.fixture
async def app(backend):
    async with in_process_app(backend) as app:
        yield app


async def overwritten_chat(app, client, extra: list) -> str:
    """A chat of one turn whose messages were then overwritten with ``extra`` appended (the reducers skipped)."""
    created = await client.post("/chats", json={})
    assert created.status_code == 201, created.text
    chat_id = created.json()["chat"]["id"]
    r = await client.post(f"/chats/{chat_id}/messages", json={"text": "I live in Oslo."})
    assert r.status_code == 200 and "event: error" not in r.text, r.text
    graph = app.state.services.graph
    cfg = {"configurable": {"thread_id": chat_id}}
    held = (await graph.aget_state(cfg)).values["messages"]
    await graph.aupdate_state(cfg, {"messages": Overwrite([*held, *extra])}, as_node=LAST_NODE)
    return chat_id


async def test_a_regenerate_of_a_message_an_overwrite_left_with_a_nul_is_refused_clearly_and_the_thread_goes_on(app, backend, user_id):
    """The run's row records the turn it answers (jsonb): a NUL there failed the turn with Postgres'
    'unsupported Unicode escape sequence' instead of the clear refusal of such a message."""
    key = await api_keys.create_key(backend.pool, user_id)
    async with client_of(app, key) as client:
        reply = str(uuid.uuid4())
        chat_id = await overwritten_chat(app, client, [HumanMessage("I like te\x00a.", id=str(uuid.uuid4())), AIMessage("ok", id=reply)])
        r = await client.post(f"/chats/{chat_id}/messages/{reply}/regenerate", json={})
        assert r.status_code == 200 and '"code": "refused"' in r.text and "NUL" in r.text, r.text
        r = await client.post(f"/chats/{chat_id}/messages", json={"text": "And now?"})
        assert r.status_code == 200 and "event: error" not in r.text, r.text


async def test_a_heartbeat_saving_a_streamed_reply_with_a_nul_stores_it_and_every_run_of_the_worker_beats(backend, user_id):
    """A worker's heartbeat is one statement for all its runs: a model's reply streamed with a NUL
    failed it, every beat after it too, and after DATABASE_LOST_SECONDS (3 s) every run of the
    worker (other users' too) was ended as if the database were gone."""
    pool = backend.pool
    dirty = await chat_runs.start_run(pool, str(uuid.uuid4()), user_id, "message", "test")
    clean = await chat_runs.start_run(pool, str(uuid.uuid4()), user_id, "message", "test")
    async with await psycopg.AsyncConnection.connect(pool.conninfo, autocommit=True, row_factory=dict_row) as conn:
        statuses = await chat_runs.heartbeat(conn, {dirty: "te\x00a and \ud800", clean: "fine"})
    assert statuses == {dirty: "running", clean: "running"}
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT run_id::text AS id, partial_reply FROM memory_agent_runs WHERE run_id = ANY(%s::uuid[])", ([dirty, clean],))).fetchall()
    assert {r["id"]: r["partial_reply"] for r in rows} == {dirty: "te\ufffda and \ufffd", clean: "fine"}


async def test_an_overwrite_with_a_nul_in_a_message_id_leaves_the_thread_working(app, backend, user_id):
    """The storage layer made a message's text storable, not its id: a NUL in an id (Studio's state
    editor writes any) failed every later turn ('PostgreSQL text fields cannot contain NUL (0x00)
    bytes' in load_context's search of what was said), and the index of what was said stopped there.
    The index keeps such an id with U+FFFD, and knows it as the state's (not written again each turn)."""
    key = await api_keys.create_key(backend.pool, user_id)
    async with client_of(app, key) as client:
        chat_id = await overwritten_chat(app, client, [HumanMessage("I like tea.", id="h\x00id"), AIMessage("ok", id="a\x00id")])
        for said in ("What do I like?", "I work as a baker."):
            r = await client.post(f"/chats/{chat_id}/messages", json={"text": said})
            assert r.status_code == 200 and "event: error" not in r.text, r.text
        async with backend.pool.connection() as conn:
            n = (await (await conn.execute("SELECT count(*) AS n FROM memory_agent_episodes WHERE thread_id = %s", (chat_id,))).fetchone())["n"]
        assert n == 8
    graph = app.state.services.graph
    messages = (await graph.aget_state({"configurable": {"thread_id": chat_id}})).values["messages"]
    again = await episodes.index_thread(backend.pool, backend.embeddings.embeddings, user_id, chat_id, messages)
    assert (again.written, again.dropped) == (0, 0)
