"""The checkpointer's serializer keeps a chat's decoded messages by the digest of their bytes
(storage.checkpoint_serde): the same bytes are not decoded twice, other bytes always are."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from storage.checkpoint_serde import CACHE_ENV, MIN_CACHED_BYTES, CheckpointSerializer, DecodedMessages, cache_budget_bytes


def chat(n: int, *, secret: str = "my bank is Zorblatt") -> list:
    return [
        HumanMessage(f"Message {i}: {secret}, and a few more words to give it a size", id=f"h{i}") if i % 2 == 0
        else AIMessage(f"Reply {i}: noted, with a few more words to give it a size as well", id=f"a{i}")
        for i in range(n)
    ]


LONG = 600  # ~90 KB encoded: past MIN_CACHED_BYTES


def serializer(budget: int = 10 * 1024 * 1024) -> CheckpointSerializer:
    return CheckpointSerializer(cache=DecodedMessages(budget))


def test_bytes_written_are_read_back_without_decoding_as_an_equal_list_of_the_callers_own():
    serde = serializer()
    messages = chat(LONG)
    blob = serde.dumps_typed(messages)
    assert len(blob[1]) >= MIN_CACHED_BYTES

    first = serde.loads_typed(blob)
    assert first == messages and serde.cache.hits == 1 and serde.cache.misses == 0
    first.append(HumanMessage("appended by a channel"))
    second = serde.loads_typed(blob)
    assert second == messages and second is not first and len(second) == LONG


def test_bytes_read_once_are_not_decoded_again_and_other_bytes_always_are():
    writer, reader = JsonPlusSerializer(), serializer()
    before = writer.dumps_typed(chat(LONG))
    redacted = writer.dumps_typed(chat(LONG, secret="[forgotten]"))  # a forget's rewrite: new bytes

    assert reader.loads_typed(before)[0].text.endswith("Zorblatt, and a few more words to give it a size")
    assert reader.cache.misses == 1
    assert reader.loads_typed(before) == chat(LONG) and reader.cache.hits == 1
    after = reader.loads_typed(redacted)
    assert "Zorblatt" not in " ".join(m.text for m in after) and reader.cache.misses == 2


def test_small_blobs_and_other_values_are_decoded_as_langgraph_decodes_them():
    serde = serializer()
    for value in (chat(4), {"summary": "x" * MIN_CACHED_BYTES}, "y" * MIN_CACHED_BYTES, None, b"raw"):
        blob = serde.dumps_typed(value)
        assert serde.loads_typed(blob) == value == JsonPlusSerializer().loads_typed(blob)
    assert serde.cache.hits == 0 and serde.cache.used == 0


def test_the_least_recently_used_blob_goes_first_within_the_budget_and_none_is_kept_at_zero():
    size = len(JsonPlusSerializer().dumps_typed(chat(LONG))[1])
    serde = serializer(budget=size * 2 + 10)
    blobs = [serde.dumps_typed(chat(LONG, secret=f"secret {i}")) for i in range(3)]
    assert serde.cache.used <= serde.cache.budget
    serde.loads_typed(blobs[1])
    serde.loads_typed(blobs[2])
    assert serde.cache.hits == 2
    serde.loads_typed(blobs[0])  # pushed out by the third
    assert serde.cache.misses == 1

    off = serializer(budget=0)
    blob = off.dumps_typed(chat(LONG))
    off.loads_typed(blob)
    assert off.cache.used == 0 and off.cache.hits == 0


def test_langgraphs_allowlist_clone_shares_the_cache():
    # A strict allowlist (LANGGRAPH_STRICT_MSGPACK): the graph's own types are added to a copy.
    serde = CheckpointSerializer(cache=DecodedMessages(1024 * 1024), allowed_msgpack_modules=[("langchain_core", "messages", "human", "HumanMessage")])
    clone = serde.with_msgpack_allowlist([("tests", "unit", "Something")])
    assert clone is not serde and isinstance(clone, CheckpointSerializer) and clone.cache is serde.cache


def test_the_cache_size_setting_is_read_in_megabytes_and_a_bad_value_is_refused_clearly(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert cache_budget_bytes() == 16 * 1024 * 1024
    monkeypatch.setenv(CACHE_ENV, "0")
    assert cache_budget_bytes() == 0
    monkeypatch.setenv(CACHE_ENV, "2.5")
    assert cache_budget_bytes() == int(2.5 * 1024 * 1024)
    for bad in ("lots", "-1"):
        monkeypatch.setenv(CACHE_ENV, bad)
        with pytest.raises(ValueError, match=CACHE_ENV):
            cache_budget_bytes()
