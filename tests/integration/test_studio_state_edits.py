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


@pytest.mark.parametrize("as_node", ["load_context", "retrieve"])
async def test_a_message_written_past_load_context_is_still_held_to_the_message_limit_before_it_is_searched_or_answered(
    backend, user_id, as_node
):
    """load_context is where a turn's message is checked, and the server refuses a Command that goes past
    it (app/studio/auth.py). update_state(..., as_node="load_context") went past it all the same: the
    next run started at retrieve, and a 150,000-character message, on a server whose limit is 20,000, was
    embedded for the knowledge search and sent to the model."""
    from core.errors import InvalidMessage

    graph, ctx, config = chat_on(backend, user_id, "offline", max_message_chars=200)
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    replies = len((await graph.aget_state(config)).values["messages"])
    too_long = "word " * 100  # 500 characters: over this context's 200
    await graph.aupdate_state(config, {"messages": [HumanMessage(too_long)]}, as_node=as_node)
    with pytest.raises(InvalidMessage, match="too long: 500 characters, the limit is 200"):
        await graph.ainvoke(None, config, context=ctx)
    messages = (await graph.aget_state(config)).values["messages"]
    assert len(messages) == replies + 1 and messages[-1].content == too_long  # answered by nothing

    # A message within the limit, written the same way, is answered as Studio's edits always were.
    graph, ctx, config = chat_on(backend, user_id, "offline", max_message_chars=200)
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    await graph.aupdate_state(config, {"messages": [HumanMessage("I live in Porto.")]}, as_node=as_node)
    out = await graph.ainvoke(None, config, context=ctx)
    assert out["messages"][-1].content.startswith("(offline model)")


# (channel, an edit of the wrong shape, as_node, what the refusal says is expected). The first three
# wedged the thread: its next turn failed and left it waiting at a node ("can only concatenate str (not
# "int") to str" in load_context; "'str' object has no attribute 'get'" and "'int' object is not
# subscriptable" past it).
WRONG_SHAPES = [
    ("user_turns", "x", None, "a whole number"),
    ("loaded_context", "x", "load_context", "what load_context finds"),
    ("retrieved_chunks", [1, "a"], "retrieve", "a list of knowledge-base chunks"),
    ("user_turns", True, None, "a whole number"),
    ("user_turns", -3, None, "a whole number, 0 or more"),
    ("tool_steps", "2", "retrieve", "a whole number"),
    ("summary_folds", 1.5, None, "a whole number"),
    ("summarized_through", 5, None, "a message id or null"),
    ("loaded_context", {"facts": "none"}, "load_context", "what load_context finds"),
    ("retrieved_chunks", [{"id": 1}], "retrieve", "a list of knowledge-base chunks"),
    ("memory_written", ["a"], None, "an object"),
    ("turn_usage", "many", "reply", "an object"),
    ("error", {"why": 1}, None, "text or null"),
]


@pytest.mark.parametrize(("channel", "bad", "as_node", "expected"), WRONG_SHAPES, ids=[f"{c}={b!r}" for c, b, _, _ in WRONG_SHAPES])
async def test_any_channel_edited_to_the_wrong_shape_is_refused_naming_it_and_the_thread_goes_on_answering(
    backend, user_id, channel, bad, as_node, expected
):
    """Every channel but the messages is checked as it is written, as the summary is: an edit no node
    could have written is a ValueError naming the channel and what it holds (the server's 400), the
    thread keeps its value, and its next turn is answered."""
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    before = await graph.aget_state(config)

    with pytest.raises(ValueError, match=f"^{channel} must be {expected}"):
        await graph.aupdate_state(config, {channel: bad}, as_node=as_node)
    after = await graph.aget_state(config)
    assert after.values == before.values and after.next == ()

    out = await graph.ainvoke({"messages": [HumanMessage("What is my name?")]}, config, context=ctx)
    assert out["messages"][-1].content.startswith("(offline model)")
    assert (await graph.aget_state(config)).next == () and out["user_turns"] == 2


@pytest.mark.parametrize(
    ("channel", "bad", "expected"),
    [("user_turns", "x", "a whole number"), ("summary", "hello", "a summary board"), ("loaded_context", "x", "what load_context finds")],
)
@pytest.mark.parametrize("form", ["dict", "typed"])
async def test_an_overwrite_of_a_channel_with_the_wrong_shape_is_refused_too(backend, user_id, channel, bad, expected, form):
    """An Overwrite skips a channel's reducer: {"user_turns": {"__overwrite__": "x"}} was saved, and the
    thread's next turn failed in load_context and left it waiting there, as the plain write had."""
    from langgraph.types import Overwrite

    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    before = await graph.aget_state(config)
    edit = {"__overwrite__": bad} if form == "dict" else Overwrite(bad)
    with pytest.raises(ValueError, match=f"^{channel} must be {expected}"):
        await graph.aupdate_state(config, {channel: edit}, as_node="extract_memories")
    assert (await graph.aget_state(config)).values == before.values
    await graph.aupdate_state(config, {"user_turns": {"__overwrite__": 5}}, as_node="extract_memories")  # a right one is kept
    out = await graph.ainvoke({"messages": [HumanMessage("What is my name?")]}, config, context=ctx)
    assert out["messages"][-1].content.startswith("(offline model)") and out["user_turns"] == 6


async def test_edits_of_the_right_shape_are_kept_as_written_with_unstorable_text_replaced(backend, user_id):
    """What Studio's editor may rightly write still is: a count, a cursor, a context, made storable (a NUL
    is replaced, as in a message, not refused) and not coerced or trimmed of keys it did not expect."""
    graph, ctx, config = chat_on(backend, user_id, "offline")
    await graph.ainvoke({"messages": [HumanMessage("My name is Ana.")]}, config, context=ctx)
    edit = {
        "user_turns": 7,
        "error": "stopped\x00",
        "memory_written": {"note": "by hand\x00", "n": 1},
        "loaded_context": {"profile": {"name": "Ana"}, "facts": [], "extra": "kept"},
    }
    await graph.aupdate_state(config, edit)
    values = (await graph.aget_state(config)).values
    assert values["user_turns"] == 7 and values["error"] == "stopped\ufffd"
    assert values["memory_written"] == {"note": "by hand\ufffd", "n": 1}
    assert values["loaded_context"] == {"profile": {"name": "Ana"}, "facts": [], "extra": "kept"}
