"""Aggregation over conversations, winner verdicts, CSV, and the price table."""

from __future__ import annotations

import csv

import pytest

from evals.experiment import ExperimentRow, ExperimentRun
from evals.pricing import estimate_cost, price_of
from evals.results import EvalResults, aggregate_variant, judge_variants, write_csv


def variant(name: str, values: list[float]) -> ExperimentRun:
    return ExperimentRun(name, f"exp-{name}", [ExperimentRow(f"c{i}", {}, {"retention": v}) for i, v in enumerate(values)])


def verdict(*runs: ExperimentRun):
    variants = [aggregate_variant(r) for r in runs]
    return judge_variants(variants, ["retention"])["retention"]


def test_a_one_point_lead_on_seven_noisy_conversations_is_not_called_a_win():
    a = [0.50, 0.62, 0.41, 0.70, 0.55, 0.48, 0.66]
    b = [0.52, 0.58, 0.43, 0.66, 0.57, 0.45, 0.61]  # a leads by ~0.014 on average, with mixed signs
    w = verdict(variant("a", a), variant("b", b))
    assert w.best == "a" and not w.significant
    assert w.verdict.startswith("No clear winner on Retention: a leads")
    assert "CI" in w.verdict and "n=7" in w.verdict


def test_a_consistent_lead_is_called_a_win_with_margin_and_confidence():
    a = [0.80, 0.82, 0.79, 0.85, 0.81, 0.83, 0.84]
    b = [0.60, 0.61, 0.58, 0.66, 0.59, 0.62, 0.63]
    w = verdict(variant("narrative", b), variant("fact_preserving", a))
    assert w.best == "fact_preserving" and w.significant
    assert w.margin == pytest.approx(sum(a) / 7 - sum(b) / 7)
    assert w.confidence == 1.0
    assert w.verdict.startswith("fact_preserving is best on Retention")


def test_identical_scores_are_reported_as_no_difference():
    w = verdict(variant("a", [0.5, 0.6]), variant("b", [0.5, 0.6]))
    assert w.verdict.startswith("No difference on Retention")


def test_a_tie_at_the_top_names_only_the_tied_variants_and_puts_the_others_behind():
    w = verdict(variant("a", [0.5, 0.6]), variant("b", [0.6, 0.5]), variant("c", [0.1, 0.2]))
    assert w.verdict == "No difference on Retention: a, b have the same mean (0.550, n=2); behind them: c 0.150."


def test_failed_conversations_are_left_out_of_the_means_and_the_comparison():
    broken = ExperimentRun("b", "exp-b", [ExperimentRow("c0", None, {}, error="boom"), ExperimentRow("c1", {}, {"retention": 0.4})])
    va, vb = aggregate_variant(variant("a", [0.9, 0.5])), aggregate_variant(broken)
    assert vb.metrics["retention"].n == 1 and vb.metrics["retention"].mean == 0.4
    w = judge_variants([va, vb], ["retention"])["retention"]
    assert w.n == 1 and w.means == {"a": 0.5, "b": 0.4}


def test_csv_has_a_row_per_conversation_and_an_overall_row_per_variant(tmp_path):
    variants = [aggregate_variant(variant("a", [0.2, 0.4])), aggregate_variant(variant("b", [0.1, 0.3]))]
    results = EvalResults(
        command="summaries",
        dataset="builtin",
        conversations=["c0", "c1"],
        model="offline",
        offline=True,
        primary_metric="retention",
        variants=variants,
        started_at="now",
        wall_seconds=1.0,
    )
    write_csv(results, tmp_path / "r.csv")
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [(r["variant"], r["scope"]) for r in rows] == [
        ("a", "conversation"), ("a", "conversation"), ("b", "conversation"), ("b", "conversation"), ("a", "overall"), ("b", "overall")
    ]
    assert float(rows[4]["retention"]) == pytest.approx(0.3)


def test_prices_are_per_million_tokens_and_unknown_models_get_no_estimate():
    assert price_of("openai:gpt-4o-mini-2024-07-18") == (0.15, 0.60)
    assert estimate_cost("gpt-4o-mini", 2_000_000, 1_000_000) == pytest.approx(0.30 + 0.60)
    assert price_of("offline") is None and estimate_cost("llama3", 10, 10) is None


def test_the_terminal_table_shows_each_variant_name_whole_on_an_80_column_terminal():
    """Names sharing a prefix were cut to the same "structu…", so two rows could not be told apart."""
    import io

    from rich.console import Console

    from evals.summaries_command import TABLE_KEYS
    from evals.terminal import results_table

    runs = [
        ExperimentRun(name, f"exp-{name}", [ExperimentRow(f"c{i}", {}, {k: 0.5 + i / 10 for k in TABLE_KEYS}) for i in range(3)])
        for name in ("structured_short", "structured_long")
    ]
    results = EvalResults(
        command="summaries", dataset="builtin", conversations=["c0", "c1", "c2"], model="offline", offline=True,
        primary_metric="retention", variants=[aggregate_variant(r) for r in runs], started_at="now", wall_seconds=1.0,
    )
    out = io.StringIO()
    Console(file=out, width=80).print(results_table(results, TABLE_KEYS))
    assert "structured_short" in out.getvalue() and "structured_long" in out.getvalue()
