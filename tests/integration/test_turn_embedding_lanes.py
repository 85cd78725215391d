"""A turn's embeddings on the lane they belong to (embeddings.batching): the message's query on the
one its reply waits on, and only when there is memory to search; the memory phase's (what was
said, indexed; the chat's text) on the background lane, which the system runs at a lower priority."""

from __future__ import annotations

import io
import uuid

import pytest

from app.cli.chat_session import ChatSession
from embeddings import encoder as encoder_module


@pytest.mark.slow  # a turn through the graph, with its memory phase
async def test_a_turns_memory_phase_embeds_on_the_background_lane_and_its_query_on_the_other(backend, user_id, monkeypatch):
    await backend.embeddings.embeddings.aembed_query(f"warm {uuid.uuid4().hex}")  # the process' lanes exist
    seen: dict[str, list[str]] = {"now": [], "background": []}
    for lanes in encoder_module._BATCHERS.values():
        for name in seen:
            lane = getattr(lanes, name)

            def recording(texts, _encode=lane._encode, _name=name):
                seen[_name].extend(texts)
                return _encode(texts)

            monkeypatch.setattr(lane, "_encode", recording)

    word = f"kestrel{uuid.uuid4().hex[:6]}"
    session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=io.StringIO(), err=io.StringIO(), context_overrides={"model": "offline", "rag_collection": f"none-{word}"})  # (other tests fill the shared knowledge base)
    first = f"My neighbour {word} keeps bees by the river."
    reply = await session.send(first)
    await session.settle()
    # A new user has nothing to search: the first message is not embedded before its reply.
    assert reply and seen["now"] == []
    assert any(reply in text for text in seen["background"])  # the turn indexed, after it
    assert any(word in text and text != first for text in seen["background"])  # the chat's text

    second = f"Does {word} sell the honey too?"
    reply = await session.send(second)
    await session.settle()
    assert reply and seen["now"] == [second]  # the query, before the reply: now there is memory to search
    assert any(reply in text for text in seen["background"])
