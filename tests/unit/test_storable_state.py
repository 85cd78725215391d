"""What enters the graph's state is text Postgres can store: a NUL or a lone surrogate is replaced
with U+FFFD (core.state's reducers), so no record or index row built from it fails later."""

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage

from core.state import UNSTORABLE, add_storable_messages, storable_value
from core.text_validation import made_storable, unstorable_reason


def test_made_storable_replaces_a_nul_and_a_lone_surrogate_and_leaves_the_rest_alone():
    assert made_storable("te\x00a \ud800 😀 é") == "te\ufffda \ufffd 😀 é"
    text = "plain text, ünïcode and 😀"
    assert made_storable(text) is text
    assert unstorable_reason(made_storable("\x00\udfff")) is None


def test_incoming_messages_of_every_shape_are_made_storable_and_the_stored_ones_are_not_rewritten():
    old = HumanMessage("kept as it was", id="1")
    merged = add_storable_messages(
        [old],
        [
            HumanMessage("a\x00b", id="2"),
            AIMessage([{"type": "text", "text": "c\x00"}, "d\ud800"], id="3"),
            {"role": "user", "content": "e\x00", "id": "4"},
        ],
    )
    assert merged[0] is old
    # Each says why, so the turn's own message is still refused as the message routes refuse it.
    assert merged[1].additional_kwargs[UNSTORABLE] == "contains a NUL character (position 1), which cannot be stored"
    assert [m.content for m in merged[1:]] == ["a\ufffdb", [{"type": "text", "text": "c\ufffd"}, "d\ufffd"], "e\ufffd"]
    assert [m.id for m in add_storable_messages(merged, RemoveMessage(id="2"))] == ["1", "3", "4"]


def test_the_summary_channel_keeps_the_newest_value_made_storable():
    assert storable_value({"topics": ["old"]}, {"topics": ["te\x00a"], "n": 2}) == {"topics": ["te\ufffda"], "n": 2}


def test_a_marked_message_sent_again_as_it_is_kept_loses_its_mark_so_a_regenerate_is_not_refused():
    [marked] = add_storable_messages([], HumanMessage("a\x00b", id="1"))
    assert UNSTORABLE in marked.additional_kwargs
    [again] = add_storable_messages([], marked)  # the stored message, re-sent (a regenerate forks before it)
    assert again.content == "a\ufffdb" and UNSTORABLE not in again.additional_kwargs


def test_a_json_value_is_made_storable_in_every_string_and_keys_too_and_left_the_same_object_when_clean():
    from core.text_validation import made_storable_value

    dirty = {"title": "te\x00a", "lines": ["ok", "\ud800"], "n\x00": 1, "nested": {"x": ("y\x00",)}, "n": 2, "none": None}
    assert made_storable_value(dirty) == {"title": "te\ufffda", "lines": ["ok", "\ufffd"], "n\ufffd": 1, "nested": {"x": ("y\ufffd",)}, "n": 2, "none": None}
    clean = {"title": "tea", "lines": ["ok"], "nested": {"x": ("y",)}}
    assert made_storable_value(clean) is clean


def test_a_tool_call_and_its_result_are_made_storable_in_arguments_name_and_id_and_stay_paired():
    from langchain_core.messages import ToolMessage

    call = {"name": "look\ud800", "args": {"query": "Haifa \udfff", "n": 2}, "id": "call_\ud800", "type": "tool_call"}
    broken = {"name": "look", "args": '{"q": "\ud800', "id": "call_2", "error": None, "type": "invalid_tool_call"}
    called, result = add_storable_messages(
        [], [AIMessage("", tool_calls=[call], invalid_tool_calls=[broken], id="a"), ToolMessage("x", tool_call_id="call_\ud800", name="look\ud800", id="t")]
    )
    assert called.tool_calls[0]["name"] == "look\ufffd" and called.tool_calls[0]["args"] == {"query": "Haifa \ufffd", "n": 2}
    assert called.invalid_tool_calls[0]["args"] == '{"q": "\ufffd'
    assert result.tool_call_id == called.tool_calls[0]["id"] == "call_\ufffd" and result.name == "look\ufffd"
    clean = AIMessage("", tool_calls=[{"name": "look", "args": {"q": "ok"}, "id": "c", "type": "tool_call"}], id="b")
    assert add_storable_messages([], clean)[0] is clean  # nothing to replace: the same message
