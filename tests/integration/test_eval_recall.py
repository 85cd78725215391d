"""`memory-agent eval recall` end to end on a tiny LoCoMo-format file written here (real Postgres, offline model)."""

from __future__ import annotations

import pytest

import json

from evals.cli import main
from tests.support.locomo_sample import locomo_sample

pytestmark = pytest.mark.slow  # a whole eval replay


def test_eval_recall_imports_asks_categories_1_to_4_and_writes_every_system_with_its_files(tmp_path, new_database):
    dataset = tmp_path / "tiny_locomo.json"
    dataset.write_text(json.dumps([locomo_sample("tiny-a"), locomo_sample("tiny-b")]), encoding="utf-8")
    out = tmp_path / "out"

    code = main(["recall", "--dataset", str(dataset), "--limit", "1", "--out", str(out), "--database-url", new_database("evalrecall"), "--no-progress"])

    assert code == 0
    for f in ("results.json", "report.md", "recall_vs_tokens.png"):
        assert (out / f).stat().st_size > 0, f
    results = json.loads((out / "results.json").read_text())
    assert results["conversations"] == ["tiny-a"]
    systems = results["systems"]
    assert set(systems) == {"memory-agent", "whole_history", "recent", "bm25_turns", "bm25_excerpts"}
    for name, s in systems.items():
        assert s["questions"] == 4, name  # the adversarial (category 5) question is not asked
        assert 0 <= s["answer_recall"] <= 1 and 0 <= s["evidence_recall"] <= 1
        assert s["prompt_tokens_median"] > 0 and set(s["per_category"]) == {"1 multi-hop", "2 temporal", "4 single-hop"}
    # The whole history holds every evidence turn; the baselines get at most the memory-agent's median.
    assert systems["whole_history"]["evidence_recall"] == 1.0
    assert results["baseline_token_budget"] == int(systems["memory-agent"]["prompt_tokens_median"])
    assert systems["bm25_turns"]["prompt_tokens_median"] <= results["baseline_token_budget"]
    assert results["load_context_ms"]["p95"] >= results["load_context_ms"]["p50"] > 0
    assert results["import_stats"]["messages"] == 8
    assert results["unrelated"]["asked"] > 0 and 0 <= results["unrelated"]["rate"] <= 1  # the gate's check runs with it
    assert set(systems["memory-agent"]["prompt_sections_median"]) >= {"system", "summary", "episodes", "recent"}
    assert "| memory-agent |" in (out / "report.md").read_text()
