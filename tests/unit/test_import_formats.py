"""Reading ChatGPT's and Claude's exports (memory.import_formats) into histories, without a database."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from memory.chat_import import ImportTooLarge, InvalidImport, parse_import, prepare_import
from memory.import_formats import export_histories, export_kind

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "exports"


def chatgpt() -> list[dict]:
    return json.loads((EXPORTS / "chatgpt_conversations.json").read_text())


def claude() -> list[dict]:
    return json.loads((EXPORTS / "claude_conversations.json").read_text())


def lisbon() -> dict:
    return next(c for c in chatgpt() if c["title"] == "Moving to Lisbon")


def test_the_exports_are_recognised_and_other_json_is_not():
    assert export_kind(chatgpt()) == "chatgpt" and export_kind(lisbon()) == "chatgpt"
    assert export_kind(claude()) == "claude"
    assert export_kind({"messages": []}) is None and export_kind([]) is None and export_kind([{"conversation": {}}]) is None
    assert export_histories({"title": "x", "messages": []}) is None


def test_chatgpt_follows_the_branch_of_the_current_node():
    [history] = export_histories([lisbon()])
    texts = [m["text"] for m in history["messages"]]
    assert texts[0].startswith("I'm moving to Lisbon") and texts[1].startswith("Congratulations on the job at Santa Maria")
    # Point current_node at the first, edited-away branch: that branch is imported instead.
    other = lisbon()
    other["current_node"] = "c7f3e9a1-0001-4d2a-b3c4-200000000001"
    [history] = export_histories([other])
    assert [m["text"][:22] for m in history["messages"]] == ["I'm moving to Porto in", "Porto is lovely in spr"]


def test_chatgpt_without_a_current_node_follows_the_latest_children():
    conversation = lisbon()
    del conversation["current_node"]
    [history] = export_histories([conversation])
    assert history["messages"][-1]["text"].startswith("Alfama is a beautiful neighbourhood")


def test_chatgpt_without_a_current_node_or_the_nodes_own_ids_follows_the_latest_children_by_their_keys():
    """The root was found by its node's "id", which the model lets be missing: the branch was empty and
    the conversation was left out as one with no text message, its messages lost without a word."""
    conversation = lisbon()
    del conversation["current_node"]
    for node in conversation["mapping"].values():
        del node["id"]
    [history] = export_histories([conversation])
    assert history["messages"][-1]["text"].startswith("Alfama is a beautiful neighbourhood")


def test_chatgpt_message_without_a_time_takes_the_one_before_and_times_never_go_back():
    conversation = lisbon()
    mapping = conversation["mapping"]
    mapping["c7f3e9a1-0003-4d2a-b3c4-200000000003"]["message"]["create_time"] = None
    mapping["aaa2c0de-0003-4b1c-8d2e-100000000003"]["message"]["create_time"] = 1709370000.0  # earlier than the question
    [history] = export_histories([conversation])
    times = [m["time"] for m in history["messages"]]
    assert times[1] == times[0] == datetime.fromtimestamp(1709370060.3, tz=timezone.utc)
    assert times == sorted(times)


def test_claude_message_without_a_time_or_with_a_null_text_is_read_as_chatgpts_are():
    """A Claude message with a null or missing created_at refused the whole export, and so did a null
    text beside its content blocks (the ChatGPT path dates such a message with the one before)."""
    export = claude()[:1]
    messages = export[0]["chat_messages"]
    messages[1]["created_at"] = None
    del messages[2]["created_at"]
    messages[1]["text"] = None
    messages[1]["content"] = [{"type": "text", "text": "Kyoto in October is lovely."}]
    [history] = export_histories(export)
    times = [m["time"] for m in history["messages"]]
    assert times[1] == times[0] and times[2] == times[1] and times == sorted(times)
    assert history["messages"][1]["text"] == "Kyoto in October is lovely."
    nothing = copy.deepcopy(export)
    nothing[0]["created_at"] = nothing[0]["updated_at"] = None
    for message in nothing[0]["chat_messages"]:
        message["created_at"] = None
    with pytest.raises(Exception, match="no message has a time, and neither has the conversation"):
        export_histories(nothing)


def test_a_conversation_without_text_is_left_out_and_an_export_of_only_those_is_refused():
    assert [h["title"] for h in export_histories(claude())] == ["Planning an October trip to Kyoto", "Cello practice routine", "Flattening a list in Python"]
    with pytest.raises(InvalidImport, match="no conversation with a text message"):
        parse_import([claude()[3]])


def test_a_broken_conversation_is_refused_by_name():
    conversations = chatgpt()
    conversations[1]["mapping"]["aaa2d1e0-0001-4f5e-9c8b-400000000001"]["message"]["author"] = "user"  # not an object
    with pytest.raises(InvalidImport, match="'Sourdough starter smell'"):
        parse_import(conversations)
    bad = copy.deepcopy(claude())
    bad[0]["chat_messages"][0]["sender"] = "robot"
    with pytest.raises(InvalidImport, match="Planning an October trip to Kyoto.*sender"):
        parse_import(bad)


def test_each_history_carries_the_conversation_id_and_a_given_title_numbers_the_chats():
    chats = parse_import(claude(), title="From Claude")
    assert [c.title for c in chats] == ["From Claude (1)", "From Claude (2)", "From Claude (3)"]
    assert [c.source_id for c in chats][0] == "claude:a1b2c3d4-1111-4aaa-8bbb-000000000001"
    no_id = lisbon()
    del no_id["id"], no_id["conversation_id"]
    [a], [b] = export_histories([no_id]), export_histories([copy.deepcopy(no_id)])
    assert a["source_id"] == b["source_id"] and a["source_id"].startswith("chatgpt:")  # known by its content


def test_chatgpt_voice_transcripts_are_kept_and_citation_marks_dropped():
    conversation = lisbon()
    mapping = conversation["mapping"]
    question = mapping["aaa2c0de-0003-4b1c-8d2e-100000000003"]["message"]
    question["content"] = {
        "content_type": "multimodal_text",
        "parts": [
            {"content_type": "audio_transcription", "text": "My landlord is Mr. Duarte.", "direction": "in", "decoding_id": None},
            {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file_0001", "size_bytes": 41230, "format": "wav"},
        ],
    }
    reply = mapping["c7f3e9a1-0003-4d2a-b3c4-200000000003"]["message"]
    reply["content"]["parts"] = ["Get a NIF first \ue200cite\ue202turn0search3\ue201 and open a bank account【4†source】."]
    [history] = export_histories([conversation])
    texts = [m["text"] for m in history["messages"]]
    assert texts[1] == "Get a NIF first and open a bank account."
    assert texts[2] == "My landlord is Mr. Duarte."


def small_chatgpt(create_time=1700000000.0, msg_time=1700000000.0, cid="c1", title="Baking") -> dict:
    return {"id": cid, "title": title, "create_time": create_time, "current_node": "n2", "mapping": {
        "n1": {"id": "n1", "message": {"id": "m1", "author": {"role": "user"}, "content": {"content_type": "text", "parts": ["I work as a baker"]}, "create_time": msg_time}, "parent": None, "children": ["n2"]},
        "n2": {"id": "n2", "message": {"id": "m2", "author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["ok"]}, "create_time": msg_time}, "parent": "n1", "children": []},
    }}  # fmt: skip


def small_claude(created="2024-01-01T00:00:00Z", msg="2024-01-01T00:00:00Z", uuid="u1") -> dict:
    return {"uuid": uuid, "name": "Baking", "created_at": created, "chat_messages": [{"uuid": "x", "sender": "human", "text": "I work as a baker", "created_at": msg}]}


@pytest.mark.parametrize(
    "conversation, says",
    [
        (small_chatgpt(create_time=1e20), "create_time"),
        (small_chatgpt(create_time=float("inf")), "create_time"),
        (small_chatgpt(msg_time=-1e13), "create_time"),
        (small_chatgpt(msg_time=1e20), "create_time"),
        (small_claude(created="0001-01-01T00:00:00+01:00"), "created_at"),
        (small_claude(msg="0001-01-01T00:30:00+01:00"), "created_at"),
        (small_claude(msg="9999-12-31T23:59:59-23:59"), "created_at"),
    ],
)
def test_an_export_time_out_of_range_is_refused_naming_the_conversation(conversation, says):
    with pytest.raises(InvalidImport) as caught:
        parse_import([small_claude(uuid="fine"), conversation] if "uuid" in conversation else [small_chatgpt(cid="fine"), conversation])
    message = str(caught.value)
    assert "conversation 1 ('Baking')" in message and says in message and "years 1 to 9999" in message, message


def test_our_formats_created_at_is_taken_as_utc_and_refused_out_of_range():
    base = {"messages": [{"role": "user", "text": "I work as a baker", "time": "2024-01-05T09:00:00Z"}]}
    [chat] = parse_import({**base, "created_at": "2024-01-05T08:00:00"})
    assert chat.created_at == datetime(2024, 1, 5, 8, tzinfo=timezone.utc)
    with pytest.raises(InvalidImport, match="created_at.*years 1 to 9999"):
        parse_import({**base, "created_at": "0001-01-01T00:00:00+01:00"})


def long_chatgpt(n: int, cid: str = "big") -> dict:
    conversation = small_chatgpt(cid=cid, title="Big")
    mapping, parent = {}, None
    for i in range(n):
        mapping[f"n{i}"] = {"id": f"n{i}", "message": {"id": f"m{i}", "author": {"role": "user" if i % 2 == 0 else "assistant"},
                            "content": {"content_type": "text", "parts": [f"line {i}"]}, "create_time": 1700000000.0 + i},
                            "parent": parent, "children": []}  # fmt: skip
        if parent:
            mapping[parent]["children"].append(f"n{i}")
        parent = f"n{i}"
    return {**conversation, "mapping": mapping, "current_node": parent}


@pytest.mark.parametrize(
    "export, says",
    [
        ([small_chatgpt(cid="good"), small_chatgpt(cid="bad\x00two", title="Bad")], "NUL"),
        ([small_claude(uuid="good"), small_claude(uuid="bad\x00two")], "NUL"),
        ([small_chatgpt(cid="good"), small_chatgpt(cid="x" * 400, title="Bad")], "300"),
        ([small_claude(uuid="good"), {**small_claude(uuid="u2"), "name": "Bad\x00"}], "NUL"),
    ],
)
def test_an_export_conversation_whose_id_or_title_cannot_be_stored_is_refused_before_anything_is_written(export, says):
    with pytest.raises(InvalidImport, match=says) as caught:
        parse_import(export)
    assert "conversation" in str(caught.value)


@pytest.mark.parametrize(
    "field, value, says",
    [("source_id", "abc\x00def", "NUL"), ("source_id", "x" * 301, "300"), ("message_source_id", "a\x00", "NUL"), ("message_source_id", "x" * 900_000, "300")],
)
def test_our_formats_ids_that_cannot_be_stored_are_refused(field, value, says):
    message = {"role": "user", "text": "I work as a baker", "time": "2024-01-05T09:00:00Z"}
    data = {"messages": [{**message, "source_id": value}]} if field == "message_source_id" else {field: value, "messages": [message]}
    with pytest.raises(InvalidImport, match=says):
        parse_import(data)


def test_every_field_to_be_stored_is_checked_by_prepare_import_too():
    [chat] = parse_import({"source_id": "s1", "messages": [{"role": "user", "text": "I work as a baker", "time": "2024-01-05T09:00:00Z"}]})
    chat.title = "bad \udcff title"  # assigned, as the CLI's --title is (argv may hold a lone surrogate), not validated
    with pytest.raises(InvalidImport, match="title.*surrogate"):
        prepare_import(chat)
    chat.title, chat.source_id = "fine", "bad\x00"
    with pytest.raises(InvalidImport, match="source_id.*NUL"):
        prepare_import(chat)


def test_an_export_conversation_over_the_message_limit_is_import_too_large_as_our_format_is():
    with pytest.raises(ImportTooLarge, match="'Big'.*5,001.*5,000") as caught:
        parse_import([small_chatgpt(cid="good"), long_chatgpt(5_001)])
    assert "conversation" in str(caught.value)


def test_a_history_past_the_byte_limit_is_said_to_be_over_it_not_one_byte_over():
    """The CLI reads one byte past the limit: a 33 MB file was said to be "32,000,001 bytes"."""
    from memory.chat_import import MAX_IMPORT_BYTES, read_import

    with pytest.raises(ImportTooLarge, match=f"over {MAX_IMPORT_BYTES:,} bytes"):
        read_import(b" " * (MAX_IMPORT_BYTES + 1))


def test_a_history_saved_as_utf16_by_powershell_is_read():
    """It was refused with "invalid char in json text"."""
    from memory.chat_import import read_import

    text = json.dumps({"title": "Notes", "messages": [{"role": "user", "text": "Grüße aus Zürich", "time": "2024-01-01T10:00:00Z"}]}, ensure_ascii=False)
    for encoded in (text.encode("utf-16"), "\ufeff".encode("utf-16-be") + text.encode("utf-16-be")):
        [chat] = read_import(encoded)
        assert chat.messages[0].text == "Grüße aus Zürich"


def dated_chatgpt(create_time, times, update_time=None) -> dict:
    """A ChatGPT conversation of alternating messages with these create_times (None: no time)."""
    mapping, parent = {}, None
    for i, t in enumerate(times):
        mapping[f"n{i}"] = {"id": f"n{i}", "message": {"id": f"m{i}", "author": {"role": "user" if i % 2 == 0 else "assistant"},
                            "content": {"content_type": "text", "parts": [f"line {i}"]}, "create_time": t}, "parent": parent, "children": []}  # fmt: skip
        if parent:
            mapping[parent]["children"].append(f"n{i}")
        parent = f"n{i}"
    return {"id": "undated", "title": "Undated", "create_time": create_time, "update_time": update_time, "current_node": parent, "mapping": mapping}


def epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def test_an_undated_first_message_of_an_undated_conversation_takes_the_next_messages_time_not_the_last_update():
    """It took the conversation's update_time (its last activity), and so did every message after it
    (times never go back): the whole conversation was dated at its end. Without update_time it was refused."""
    [history] = export_histories([dated_chatgpt(None, [None, 1700000100.0, 1700000200.0], update_time=1700009999.0)])
    assert [m["time"] for m in history["messages"]] == [epoch(1700000100.0), epoch(1700000100.0), epoch(1700000200.0)]
    [history] = export_histories([dated_chatgpt(None, [None, None, 1700000100.0])])
    assert [m["time"] for m in history["messages"]] == [epoch(1700000100.0)] * 3
    # No message has a time: the conversation's last update, the only time it has.
    [history] = export_histories([dated_chatgpt(None, [None, None], update_time=1700009999.0)])
    assert [m["time"] for m in history["messages"]] == [epoch(1700009999.0)] * 2
    # The same for Claude (its updated_at).
    claude_export = claude()[:1]
    claude_export[0]["created_at"] = None
    claude_export[0]["chat_messages"][0]["created_at"] = None
    [history] = export_histories(claude_export)
    second = datetime.fromisoformat(claude()[0]["chat_messages"][1]["created_at"])
    assert history["messages"][0]["time"] == history["messages"][1]["time"] == second


def test_a_conversation_with_no_time_anywhere_is_refused_naming_it():
    with pytest.raises(InvalidImport, match=r"chatgpt conversation 1 \('Undated'\): no message has a time, and neither has the conversation"):
        parse_import([small_chatgpt(), dated_chatgpt(None, [None, None])])


def test_an_export_holding_one_conversation_twice_the_same_imports_it_once_and_counts_the_copy():
    """Both copies became chats to import: the second was then told "imported before" by the first."""
    twice = small_chatgpt(cid="twice")
    chats = parse_import([twice, small_chatgpt(cid="other", title="Other"), copy.deepcopy(twice)])
    assert [c.source_id for c in chats] == ["chatgpt:twice", "chatgpt:other"]
    assert [c.skipped_copies for c in chats] == [1, 0]


def grown_chatgpt(cid: str, title: str) -> dict:
    """small_chatgpt with a third message: the same conversation, gone on."""
    conversation = small_chatgpt(cid=cid, title=title)
    conversation["mapping"]["n2"]["children"] = ["n3"]
    conversation["mapping"]["n3"] = {"id": "n3", "message": {"id": "m3", "author": {"role": "user"}, "content": {"content_type": "text", "parts": ["I moved"]},
                                     "create_time": 1700000100.0}, "parent": "n2", "children": []}  # fmt: skip
    conversation["current_node"] = "n3"
    return conversation


def renamed(conversation: dict, **changes) -> dict:
    return {**copy.deepcopy(conversation), **changes}


@pytest.mark.parametrize(
    "export, source_id",
    [
        ([small_chatgpt(cid="dup"), small_chatgpt(cid="dup", title="Bread")], "chatgpt:dup"),  # another title
        ([small_chatgpt(cid="dup"), grown_chatgpt("dup", "Bread")], "chatgpt:dup"),  # the second has gone on: it was added to the first's chat
        ([small_chatgpt(cid="dup"), {**renamed(grown_chatgpt("x", "Bread"), conversation_id="dup"), "id": None}], "chatgpt:dup"),  # id / conversation_id
        ([small_claude(uuid="dup"), renamed(small_claude(uuid="dup"), name="Bread")], "claude:dup"),
    ],
)
def test_an_export_holding_two_different_conversations_with_one_id_is_refused_naming_both(export, source_id):
    """The second was merged into the first's chat (when it began with its messages) or said to be
    "imported before" (nothing added, or a false "edited where it came from")."""
    with pytest.raises(InvalidImport) as caught:
        parse_import([small_chatgpt(cid="fine", title="Fine") if "mapping" in export[0] else small_claude(uuid="fine"), *export])
    message = str(caught.value)
    assert "conversations 1 ('Baking') and 2 ('Bread')" in message and f"the same id, {source_id}, but differ" in message, message


def test_a_claude_message_dated_before_its_conversations_creation_keeps_its_time():
    """Claude's messages kept their own times (a conversation's created_at is not one of its messages');
    since the undated first messages were read anew, a message earlier than created_at took created_at:
    its time changed, and with it the history's digest (an incomplete import begun before could no
    longer be resumed, and was said to be "from another export")."""
    conversation = small_claude(created="2024-01-01T00:00:05Z", msg="2024-01-01T00:00:00Z")
    conversation["chat_messages"].append({"uuid": "y", "sender": "assistant", "text": "Nice", "created_at": "2024-01-01T00:00:10Z"})
    [history] = export_histories([conversation])
    assert [m["time"].isoformat() for m in history["messages"]] == ["2024-01-01T00:00:00+00:00", "2024-01-01T00:00:10+00:00"]
    # An undated first message still takes the conversation's creation time.
    conversation["chat_messages"][0]["created_at"] = None
    [history] = export_histories([conversation])
    assert [m["time"].isoformat() for m in history["messages"]] == ["2024-01-01T00:00:05+00:00", "2024-01-01T00:00:10+00:00"]
