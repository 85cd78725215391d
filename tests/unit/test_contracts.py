"""The packer and the knowledge chunk hand on exactly the contracts' keys (core.contracts), as
plain dicts (the state is checkpointed as JSON-friendly values)."""

from __future__ import annotations

from core.contracts import Chunk, Excerpt, ExcerptLine
from knowledge import RetrievedChunk
from prompts.excerpts import pack_excerpts


def _line(i: int, text: str) -> ExcerptLine:
    return ExcerptLine(message_id=f"m{i}", position=i, role="user", sent_at=f"2026-05-0{i + 1}T10:00:00+00:00", text=text)


def test_packed_excerpts_have_exactly_the_excerpt_keys():
    ranked = [
        Excerpt(thread_id="t1", chat_title="Garden", score=0.9, lines=[_line(1, "I planted basil"), _line(2, "and mint")]),
        Excerpt(thread_id="t2", chat_title="Trip", score=0.5, lines=[_line(3, "We fly to Rome")]),
    ]
    packed = pack_excerpts(ranked, 500)
    assert len(packed) == 2
    for excerpt in packed:
        assert type(excerpt) is dict and set(excerpt) == set(Excerpt.__annotations__)
        assert all(set(line) == set(ExcerptLine.__annotations__) for line in excerpt["lines"])


def test_a_retrieved_chunk_is_kept_as_exactly_the_chunk_keys():
    found = RetrievedChunk(id=1, source="guide.md", chunk_index=0, heading_path="Setup", content="Plug it in.", collection="default",
                           rrf_score=0.03, tokens=12, metadata={"page": 1})
    chunk = found.as_chunk()
    assert type(chunk) is dict and set(chunk) == set(Chunk.__annotations__)
    assert chunk["citation"] == "guide.md#0"
