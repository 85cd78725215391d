"""`memory-agent eval retrieval` end to end on the embedded Postgres, on the fixture documents only (fast)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

import knowledge
from evals.retrieval_eval import RetrievalOptions, load_retrieval_set, run_retrieval
from storage.postgres import open_pool

FIXTURES = "tests/fixtures/kb"


def fixture_subset(tmp_path, *, broken_label: bool = False):
    """The shipped set's questions about tests/fixtures/kb plus ten of its unrelated messages."""
    data = load_retrieval_set()
    related = [q for q in data.queries if q.related and all(l.source.startswith(FIXTURES) for l in q.relevant)]
    unrelated = [q for q in data.queries if not q.related][:10]
    if broken_label:
        related[0].relevant[0].heading = "A heading nobody wrote"
    path = tmp_path / "subset.json"
    path.write_text(json.dumps({"corpus": [FIXTURES], "queries": [q.model_dump() for q in related + unrelated]}))
    return path, len(related), len(unrelated)


@pytest.mark.slow  # runs the whole retrieval eval twice
async def test_the_eval_reports_unrelated_and_related_figures_with_and_without_the_gate(new_database, tmp_path):
    url = new_database("reteval")
    path, n_related, n_unrelated = fixture_subset(tmp_path)
    console = Console(record=True, width=200)

    results = await run_retrieval(RetrievalOptions(dataset=path, out=tmp_path / "out", database_url=url, calibrate=True), console)

    everything = results.figures[-1]
    assert (everything.split, everything.related, everything.unrelated) == ("all", n_related, n_unrelated)
    assert everything.unrelated_with_chunks_ungated == n_unrelated  # before the gate every message got chunks
    assert everything.unrelated_with_chunks == 0
    assert everything.related_hits >= n_related - 1
    assert results.calibration is not None and results.calibration.related_admitted == 1.0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["command"] == "retrieval"
    printed = console.export_text()
    assert "unrelated with any chunk" in printed and "Targets:" in printed
    assert "held-out met" in printed or "held-out MISSED" in printed  # each split is judged, not only "all"
    # The eval's collection is gone again.
    pool = await open_pool(url, max_size=1)
    try:
        assert await knowledge.stats(pool) == {"documents": 0, "chunks": 0, "collections": {}}
    finally:
        await pool.close()


@pytest.mark.slow
async def test_a_label_naming_a_heading_the_corpus_lacks_is_an_error_not_a_miss(new_database, tmp_path):
    path, _, _ = fixture_subset(tmp_path, broken_label=True)
    with pytest.raises(ValueError, match="A heading nobody wrote"):
        await run_retrieval(RetrievalOptions(dataset=path, out=tmp_path / "out", database_url=new_database("reteval")), Console(quiet=True))
