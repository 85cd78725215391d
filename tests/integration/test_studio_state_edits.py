"""What Studio's state editor (``update_state``, LangGraph Server's ``POST /threads/{id}/state``) may
write into a thread's channels, on the real graph and Postgres saver with the offline model.

Its writes skip every node: a value no node could have written must be refused as it is written,
saying which channel, not saved to fail every later turn of the thread (and the chat API's read of it)."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from tests.support.graph_turns import chat_on


async def test_a_summary_edited_into_something_no_board_is_refused_naming_the_channel_and_the_thread_goes_on(backend, user_id):
    """A string or a list saved as the summary failed every later turn with pydantic's "Input should be
    a valid dictionary or instance of SummaryBoard", leaving the thread stuck before its reply."""
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    before = (await graph.aget_state(config)).values.get("summary")

    for bad in ("We talked about tea.", [1, 2], {"key_facts": "not a list"}, {"summary": 5}):
        with pytest.raises(ValueError, match="summary"):
            await graph.aupdate_state(config, {"summary": bad})
    assert (await graph.aget_state(config)).values.get("summary") == before

    # A board, even a partial one, is an edit like any other: kept, and the next turn reads it.
    await graph.aupdate_state(config, {"summary": {"summary": "Ana likes green tea."}})
    out = await graph.ainvoke({"messages": [HumanMessage("What do I like?")]}, config, context=ctx)
    assert out["messages"][-1].content.startswith("(offline model)")
    assert (await graph.aget_state(config)).values["summary"]["summary"] == "Ana likes green tea."
