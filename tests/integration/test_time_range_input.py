"""Every time_range gives a window or a clear error, through the one parser, in the agent's history tool
and in MCP (issue 31, item 4: `99999999999d`, `9999-12-31`, `..9999-12-31` gave "Python int too large
to convert to C int")."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from app.mcp import server as mcp_server
from core.context import Context
from graph.assembly import compile_graph
from memory import queries as q
from tests.support.scripted_model import ScriptedChatModel

PAST_WHAT_A_DATE_HOLDS = [
    "99999999999d",
    "99999999999h",
    "last 999999999 months",
    "9" * 5000 + "d",  # past int()'s digit limit, a ValueError of its own
    "9999-12-31",  # the day ends in year 10000
    "..9999-12-31",
    "2025-01-01..9999-12-31",
    "9999-12-31T23:59:59-23:59..",  # year 10000 in UTC
    "0001-01-01T00:00:00+01:00..",  # year 0 in UTC
]
NOT_A_RANGE = ["eventually", "2025-13-01", "2025-02-30..", "..tomorrow", "7 fortnights", "2025-02-01..2025-01-01"]
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("spec", PAST_WHAT_A_DATE_HOLDS + NOT_A_RANGE)
def test_a_time_range_that_names_no_window_is_a_clear_invalid_time_range(spec):
    with pytest.raises(q.InvalidTimeRange) as refused:
        q.parse_time_range(spec, NOW)
    message = str(refused.value)
    assert "time_range" in message and "C int" not in message and len(message) < 600
    if spec in PAST_WHAT_A_DATE_HOLDS:
        assert "outside the years 1-9999" in message


def test_windows_up_to_the_edges_of_the_calendar_still_work():
    assert q.parse_time_range("..9999-12-30", NOW).end == datetime(9999, 12, 31, tzinfo=timezone.utc)
    assert q.parse_time_range("0001-01-01..", NOW).start == datetime(1, 1, 1, tzinfo=timezone.utc)
    assert q.parse_time_range("2025-06-01T10:00:00+02:00..", NOW).start == datetime(2025, 6, 1, 8, tzinfo=timezone.utc)
    assert q.parse_time_range("739000d", NOW).start.year == 3  # back to year 3: still a date


async def test_the_mcp_history_tool_answers_an_overflowing_range_with_a_clear_error(backend, user_id):
    server = mcp_server.build_server(backend, user_id)
    for spec in ("99999999999d", "9999-12-31", "..9999-12-31"):
        with pytest.raises(Exception) as refused:
            await server.call_tool("search_conversation_history", {"query": "kayak", "time_range": spec})
        assert type(refused.value).__name__ == "ToolError", repr(refused.value)
        assert "outside the years 1-9999" in str(refused.value) and "C int" not in str(refused.value)


async def test_the_agents_history_tool_tells_the_model_what_was_wrong_with_the_range(backend, user_id):
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    specs = ["99999999999d", "9999-12-31", "..9999-12-31"]

    def responder(kind, messages):
        if kind == "reply" and not isinstance(messages[-1], ToolMessage):
            calls = [{"name": "search_conversation_history", "args": {"query": "kayak", "time_range": s}, "id": f"call_{i}"} for i, s in enumerate(specs)]
            return AIMessage("", tool_calls=calls)
        return {"new_facts": []} if kind == "extract" else ({"title": "Kayak"} if kind == "title" else "Nothing found.")

    from llm.chat_model import register_model, unregister_model

    register_model(name, ScriptedChatModel(responder=responder))
    try:
        graph = compile_graph(backend.checkpointer, backend.store)
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        out = await graph.ainvoke({"messages": [HumanMessage("When did I buy the kayak?")]}, config, context=Context(user_id=user_id, model=name))
    finally:
        unregister_model(name)
    results = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 3
    for spec, text in zip(specs, results):
        assert f"time_range '{spec}' reaches outside the years 1-9999" in text and "C int" not in text, text
