"""Every failure of the summary steps (summarize, record_chat) and of extract_memories is counted in /metrics by kind, not only bad model JSON.

The real graph on the real Postgres; the model is scripted (it raises where a provider
would), and the database failure is a real one: a trigger that refuses the user's fact rows.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from core.errors import ModelOutputError
from core.metrics import failure_kind
from graph.assembly import compile_graph
from core.context import Context
from llm.chat_model import register_model, unregister_model
from memory.user_memory import get_chat, list_facts
from storage import episodes as episode_table
from tests.support.graph_turns import metric, new_thread, stream_turn
from tests.support.scripted_model import ScriptedChatModel, empty_extraction

EXTRACTION = "memory_agent_extraction_failures_total"
SUMMARY = "memory_agent_summary_failures_total"


class ProviderDown(ConnectionError):
    """What a model client raises when the provider cannot be reached."""


def responder_failing_at(failing: str):
    def respond(kind, messages):
        if kind == failing:
            raise ProviderDown("the provider is unreachable")
        if kind == "extract":
            return {**empty_extraction(), "new_facts": [{"text": "Plays the cello"}]}
        if kind == "fold":
            return {"summary": "Numbers were discussed.", "topics": ["numbers"]}
        if kind == "title":
            return {"title": "Numbers"}
        return "Answered."

    return respond


@pytest.fixture
def scripted(request):
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=responder_failing_at(request.param)))
    yield name
    unregister_model(name)


def counts(name: str) -> dict[str, float]:
    return {kind: metric(name, {"kind": kind}) for kind in ("invalid_output", "provider", "database", "internal")}


def plus_one(before: dict[str, float], kind: str) -> dict[str, float]:
    return {**before, kind: before[kind] + 1}


@pytest.mark.parametrize("scripted", ["extract"], indirect=True)
async def test_a_provider_error_in_extraction_is_counted_and_the_turn_keeps_its_answer(backend, user_id, scripted):
    graph = compile_graph(backend.checkpointer, backend.store)
    before = counts(EXTRACTION)
    turn = await stream_turn(graph, "The cello sounds lovely", new_thread(), Context(user_id=user_id, model=scripted))
    assert turn.final_reply.content == "Answered."
    assert "ProviderDown" in turn.values["memory_written"]["error"]
    assert counts(EXTRACTION) == plus_one(before, "provider")
    assert await list_facts(backend.store, user_id) == []


FOLD_SOON = dict(summary_window=8, tail_size=4, max_context_tokens=100_000)  # turn 5 folds turns 1-3


async def five_turns_folding_soon(backend, user_id: str, scripted):
    """Five turns "turn n: number n." on a new thread under FOLD_SOON; the graph and the thread's config."""
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx, config = Context(user_id=user_id, model=scripted, **FOLD_SOON), new_thread()
    for n in range(1, 6):
        await graph.ainvoke({"messages": [("user", f"turn {n}: number {n}.")]}, config, context=ctx)
    return graph, config


@pytest.mark.slow
@pytest.mark.parametrize("scripted", ["fold"], indirect=True)
async def test_a_provider_error_in_a_summary_fold_is_counted(backend, user_id, scripted):
    before = counts(SUMMARY)
    graph, config = await five_turns_folding_soon(backend, user_id, scripted)
    values = (await graph.aget_state(config)).values
    assert values.get("summarized_through") is None and values.get("summary_folds", 0) == 0  # refolded later
    assert counts(SUMMARY) == plus_one(before, "provider")


@pytest.mark.slow
@pytest.mark.parametrize("scripted", ["fold"], indirect=True)
async def test_a_failed_fold_still_leaves_the_chat_recorded_and_every_message_indexed(backend, user_id, scripted):
    # One node a job (graph/assembly.py MEMORY_PHASE): the fold's failure is its own, not the record's or the index's.
    graph, config = await five_turns_folding_soon(backend, user_id, scripted)
    thread_id = config["configurable"]["thread_id"]
    chat = await get_chat(backend.store, user_id, thread_id)
    assert chat.message_count == 10 and "turn 5: number 5." in chat.summary_text
    async with backend.pool.connection() as conn:
        rows = await (await conn.execute(f"SELECT count(*) AS n FROM {episode_table.TABLE} WHERE owner = %s AND thread_id = %s", (user_id, thread_id))).fetchone()
    assert rows["n"] == 10


@pytest.mark.slow
@pytest.mark.parametrize("scripted", ["title"], indirect=True)
async def test_a_provider_error_while_titling_a_chat_is_counted(backend, user_id, scripted):
    before = counts(SUMMARY)
    graph, config = await five_turns_folding_soon(backend, user_id, scripted)
    assert (await graph.aget_state(config)).values["summary_folds"] == 1  # the fold itself worked
    chat = await get_chat(backend.store, user_id, config["configurable"]["thread_id"])
    assert chat.title == "Turn 1"  # the keyword title of the first exchange stays
    assert counts(SUMMARY) == plus_one(before, "provider")


@pytest.mark.parametrize("scripted", ["none"], indirect=True)
async def test_a_database_error_while_writing_memories_is_counted(backend, user_id, scripted):
    graph = compile_graph(backend.checkpointer, backend.store)
    trigger = f"refuse_facts_{user_id}"
    async with backend.pool.connection() as conn:
        await conn.execute(
            """CREATE OR REPLACE FUNCTION refuse_fact_rows() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                 IF NEW.prefix = 'users.' || TG_ARGV[0] || '.facts' THEN RAISE EXCEPTION 'fact rows are refused'; END IF;
                 RETURN NEW;
               END $$"""
        )
        await conn.execute(f"CREATE TRIGGER {trigger} BEFORE INSERT OR UPDATE ON store FOR EACH ROW EXECUTE FUNCTION refuse_fact_rows('{user_id}')")
    before = counts(EXTRACTION)
    try:
        with pytest.raises(psycopg.Error, match="fact rows are refused"):
            await graph.ainvoke({"messages": [("user", "I play the cello")]}, new_thread(), context=Context(user_id=user_id, model=scripted))
    finally:
        async with backend.pool.connection() as conn:
            await conn.execute(f"DROP TRIGGER {trigger} ON store")
    assert counts(EXTRACTION) == plus_one(before, "database")


def test_failure_kinds_tell_bad_output_the_provider_the_database_and_bugs_apart():
    assert failure_kind(ModelOutputError("invalid twice"), model_call=True) == "invalid_output"
    assert failure_kind(ProviderDown("refused"), model_call=True) == "provider"
    assert failure_kind(TimeoutError(), model_call=True) == "provider"
    assert failure_kind(psycopg.OperationalError("server closed the connection")) == "database"
    assert failure_kind(PoolTimeout("no connection")) == "database"
    assert failure_kind(KeyError("slot")) == "internal"  # outside the model call: a bug of ours
