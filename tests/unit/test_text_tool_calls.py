"""Finding tool calls written as text, and holding them out of a token stream, whatever the chunking."""

from __future__ import annotations

import json

import pytest

from llm.text_tool_calls import CallTextFilter, find_text_calls

CALL = json.dumps({"name": "add_task", "arguments": {"description": "Renew passport"}})


def streamed(text: str, size: int) -> str:
    f = CallTextFilter()
    shown = "".join(f.feed("m1", text[i : i + size]) for i in range(0, len(text), size))
    return shown + f.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (CALL, ""),
        (f"  {CALL}\n", "  \n"),
        (f"<tool_call>\n{CALL}\n</tool_call>", ""),
        (f"Sure.\n```json\n{CALL}\n```\nAdding it.", "Sure.\n\nAdding it."),
        (f"I will add it: {CALL} now.", "I will add it:  now."),
        ("A JSON example: {\"city\": \"Haifa\"} and ```python\nprint({'a': 1})\n```", None),
        ("Set braces { like this } and `code` and a < b.", None),
        ("Unfinished <tool_c", None),
    ],
)
def test_calls_are_held_out_of_the_stream_and_everything_else_is_shown(text, shown, size):
    assert streamed(text, size) == (text if shown is None else shown)


def test_a_new_message_releases_the_last_ones_held_text():
    f = CallTextFilter()
    assert f.feed("m1", "Count to ```") == "Count to "
    assert f.feed("m2", "Next") == "```Next"


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "recall_context", "parameters": {"context_type": "facts"}}', [("recall_context", {"context_type": "facts"})]),
        ('{"name": "get_conversation_summary"}', [("get_conversation_summary", {})]),
        ('[{"name": "a_b", "arguments": "{\\"x\\": 1}"}, {"name": "c_d", "args": {}}]', [("a_b", {"x": 1}), ("c_d", {})]),
        ('{"name": "Dana", "city": "Haifa"}', []),  # data, not a call
        ('{"name": "Dana"}', []),
        ("No calls here.", []),
    ],
)
def test_what_counts_as_a_call(text, calls):
    assert find_text_calls(text).calls == calls


def test_a_small_model_echoing_its_tool_list_and_a_call_of_no_such_tool_shows_nothing():
    """What Qwen2.5-Coder 0.5B answered behind llama-cpp-python to "use the add_task tool"."""
    echoed = (
        '<tools>\n{"type": "function", "function": {"name": "add_task", "description": "Add a task", "parameters": '
        '{"type": "object", "properties": {"description": {"type": "string"}}, "required": ["description"]}}}\n</tools>\n\n'
        '{"name": "buy milk", "arguments": {"description": "Buy milk from the supermarket."}}'
    )
    found = find_text_calls(echoed)
    assert [name for name, _ in found.calls] == ["add_task", "buy milk"] and found.prose == ""
    for size in (1, 5, 1000):
        assert streamed(echoed, size).strip() == ""


def test_broken_json_that_reads_as_a_call_is_an_invalid_call_and_never_streamed():
    """What 0.5B wrote on "What tasks do I have?": calls with a runaway string, cut at the output cap."""
    broken = (
        'Let me look. {"name": "add_task", "arguments": "{\\"description\\": \\"Add a task\\", \\"due\\": null}\\"} '
        '{"name": "update_task", "arguments": "{\\"description\\": \\"Change a'
    )
    found = find_text_calls(broken)
    assert found.found and found.prose == "Let me look." and found.calls[0][0] == ""
    for size in (1, 4, 1000):
        assert streamed(broken, size).strip() == "Let me look."


def test_a_tool_name_opening_a_broken_object_is_an_invalid_call_and_never_streamed():
    """What the 0.5B answered "What do you know about me?" with on 27 Nov 2026, cut at the reply cap."""
    for garbled in ('{"name": "recall_context", "{"name": "recall_context", "{"name": "recall_context", "', '{"name": "recall_context", "\n'):
        found = find_text_calls(garbled)
        assert found.found and found.prose == ""
        for size in (1, 6, 1000):
            assert streamed(garbled, size).strip() == ""
    assert not find_text_calls('{"name": "Dana", "city": "Haifa"}').found  # JSON the user asked for stays


def test_a_call_cut_before_its_name_was_whole_is_an_invalid_call_and_never_shown():
    """The 0.5B (tools on, reply cap 96) wrote an add_task and an update_task call, then '{"name": "' at the
    cap: that fragment was streamed, stored and shown as its reply."""
    calls = '{"name": "add_task", "arguments": {"description": "Complete the task for Dana"}}\n'
    for cut in ('{"name": "', '{"name": "update_', '{"name": "update_task"', '{"tool":"'):
        for text in (cut, calls + cut):
            found = find_text_calls(text)
            assert found.found and found.calls[-1][0] == "" and found.prose == ""
            for size in (1, 5, 1000):
                assert streamed(text, size).strip() == ""
    assert not find_text_calls('My cat is called {"name": "Tom"}.').found


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_valid_call_followed_by_call_shaped_junk_keeps_neither_in_the_text(size):
    """0.5B behind llama-cpp-python: one good call, then calls whose strings swallow stray keys."""
    good = '{"name": "search_conversation_history", "arguments": {"query": "tasks", "time_range": "all"}}'
    junk = '{"name": "add_task", "arguments": "{\\"description\\": \\"Add\\"} {"name": "x", "task_id": null}'
    found = find_text_calls(f"{good}\n  {junk}")
    assert [n for n, _ in found.calls] == ["search_conversation_history", ""] and found.prose == ""
    assert streamed(f"{good}\n  {junk}", size).strip() == ""
    assert streamed('{"name": "add_task", "arguments": "x", "task_id": null}', size) == ""  # valid JSON, a key no call has


def test_a_call_whose_argument_copies_the_tools_own_description_is_not_made_and_asks_for_words():
    """The 0.5B answered "Hi! My name is Dana, I live in Haifa…" with this add_task call (a confirmation for a non-task)."""
    from langchain_core.messages import AIMessage

    from llm.text_tool_calls import with_text_calls_resolved
    from nodes.tools import agent_tools

    copied = {"name": "add_task", "arguments": {"description": "Add a task to the user's task list (the user is asked to confirm)."}}
    message, needs_words = with_text_calls_resolved(AIMessage(json.dumps(copied)), agent_tools())
    assert needs_words and not message.tool_calls
    real = {"name": "add_task", "arguments": {"description": "Renew my passport"}}
    message, needs_words = with_text_calls_resolved(AIMessage(json.dumps(real)), agent_tools())
    assert not needs_words and message.tool_calls[0]["args"] == {"description": "Renew my passport"}


def test_a_real_call_the_server_sent_without_an_id_gets_one_and_ids_that_were_sent_are_kept():
    from langchain_core.messages import AIMessage

    from llm.text_tool_calls import with_text_calls_resolved

    sent = AIMessage("", tool_calls=[{"name": "recall_context", "args": {"context_type": "facts"}, "id": None}, {"name": "recall_context", "args": {"context_type": "tasks"}, "id": "call_kept"}])
    resolved, needs_plain_answer = with_text_calls_resolved(sent, [])
    first, second = resolved.tool_calls
    assert first["id"].startswith("call_") and second["id"] == "call_kept" and not needs_plain_answer
    assert (first["name"], first["args"]) == ("recall_context", {"context_type": "facts"})
    complete = AIMessage("", tool_calls=[{"name": "recall_context", "args": {}, "id": "call_1"}])
    assert with_text_calls_resolved(complete, [])[0] is complete
