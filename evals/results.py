"""The results of one eval run (``results.json``), and how they are aggregated and judged.

Per variant and conversation the evaluators' scores are kept as they are; the
overall figure of a metric is the mean over conversations with its percentile
bootstrap 95% CI (``evals.metrics.bootstrap_ci``). The best variant on a metric
is chosen with ``decide_winner``: paired bootstrap over the conversations every
variant was scored on, so a lead is only called a win when the CI of the
difference excludes 0.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evals.experiment import ExperimentRun
from evals.metric_catalog import metric, ordered_keys
from evals.metrics import bootstrap_ci, decide_winner

__all__ = [
    "ConversationResult",
    "EvalResults",
    "MetricSummary",
    "VariantResult",
    "WinnerResult",
    "aggregate_variant",
    "failure_notes",
    "judge_variants",
    "write_csv",
]


class ConversationResult(BaseModel):
    key: str
    scores: dict[str, float] = Field(default_factory=dict)
    error: str | None = None  # the run of this conversation failed: not scored
    evaluator_errors: list[str] = Field(default_factory=list)  # metrics missing because their evaluator raised
    details: dict[str, Any] = Field(default_factory=dict)  # e.g. the final summary, for the report


class MetricSummary(BaseModel):
    key: str
    label: str
    mean: float
    ci_low: float
    ci_high: float
    n: int


class VariantResult(BaseModel):
    variant: str
    experiment_name: str | None = None
    url: str | None = None
    metrics: dict[str, MetricSummary] = Field(default_factory=dict)
    conversations: list[ConversationResult] = Field(default_factory=list)

    def mean(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m.mean


class WinnerResult(BaseModel):
    metric: str
    label: str
    best: str
    runner_up: str | None
    margin: float
    ci_low: float
    ci_high: float
    confidence: float
    significant: bool
    n: int
    means: dict[str, float]
    verdict: str


class EvalResults(BaseModel):
    command: str
    dataset: str
    conversations: list[str]
    model: str
    offline: bool
    settings: dict[str, Any] = Field(default_factory=dict)
    primary_metric: str
    variants: list[VariantResult]
    winners: dict[str, WinnerResult] = Field(default_factory=dict)
    langsmith_dataset: str | None = None
    langsmith_uploaded: bool = False
    notes: list[str] = Field(default_factory=list)
    started_at: str
    wall_seconds: float

    def variant(self, name: str) -> VariantResult:
        return next(v for v in self.variants if v.variant == name)


def aggregate_variant(run: ExperimentRun, details: dict[str, dict[str, Any]] | None = None, seed: int = 0) -> VariantResult:
    """Per-metric mean and bootstrap CI over the conversations of one variant."""
    conversations = [
        ConversationResult(
            key=r.key, scores=r.scores, error=r.error, evaluator_errors=r.evaluator_errors, details=(details or {}).get(r.key, {})
        )
        for r in run.rows
    ]
    keys = ordered_keys({k for c in conversations for k in c.scores})
    metrics: dict[str, MetricSummary] = {}
    for key in keys:
        values = [c.scores[key] for c in conversations if key in c.scores]
        mean, low, high = bootstrap_ci(values, seed=seed)
        metrics[key] = MetricSummary(key=key, label=metric(key).label, mean=mean, ci_low=low, ci_high=high, n=len(values))
    return VariantResult(
        variant=run.variant, experiment_name=run.experiment_name, url=run.url, metrics=metrics, conversations=conversations
    )


def _verdict(w: WinnerResult) -> str:
    label = w.label
    if w.runner_up is None:
        return f"Only one variant ({w.best}) was run: nothing to compare on {label}."
    if abs(w.margin) < 1e-12:
        # Only the variants level with the best are tied; the others are below it, not "the same".
        tied = sorted(n for n, m in w.means.items() if abs(m - w.means[w.best]) < 1e-12)
        behind = sorted((n for n in w.means if n not in tied), key=lambda n: -w.means[n])
        text = f"No difference on {label}: {', '.join(tied)} have the same mean ({w.means[w.best]:.3f}, n={w.n})"
        return text + (f"; behind them: {', '.join(f'{n} {w.means[n]:.3f}' for n in behind)}." if behind else ".")
    head = (
        f"{w.best} {w.means[w.best]:.3f} vs {w.runner_up} {w.means[w.runner_up]:.3f}: margin {w.margin:+.3f}, "
        f"95% CI of the difference [{w.ci_low:+.3f}, {w.ci_high:+.3f}], {w.best} ahead in {w.confidence:.0%} "
        f"of bootstrap resamples over n={w.n} conversations"
    )
    if w.significant:
        return f"{w.best} is best on {label} ({head})."
    return f"No clear winner on {label}: {w.best} leads, but the CI includes 0 ({head})."


def judge_variants(variants: Sequence[VariantResult], keys: Sequence[str], seed: int = 0) -> dict[str, WinnerResult]:
    """``decide_winner`` per metric, on the conversations every variant has a score for."""
    winners: dict[str, WinnerResult] = {}
    for key in keys:
        per_variant = {v.variant: {c.key: c.scores[key] for c in v.conversations if key in c.scores} for v in variants}
        common = [k for k in (variants[0].conversations if variants else []) if all(k.key in s for s in per_variant.values())]
        if not common:
            continue
        aligned = {name: [scores[c.key] for c in common] for name, scores in per_variant.items()}
        d = decide_winner(aligned, seed=seed)
        w = WinnerResult(metric=key, label=metric(key).label, verdict="", **d.as_dict())
        w.verdict = _verdict(w)
        winners[key] = w
    return winners


def write_csv(results: EvalResults, path: Path) -> None:
    """One row per variant and conversation, then one overall (mean) row per variant."""
    keys = ordered_keys({k for v in results.variants for c in v.conversations for k in c.scores})
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["variant", "scope", "conversation", *keys, "error"])
        for v in results.variants:
            for c in v.conversations:
                writer.writerow([v.variant, "conversation", c.key, *[_cell(c.scores.get(k)) for k in keys], c.error or ""])
        for v in results.variants:
            writer.writerow([v.variant, "overall", f"mean of {len(v.conversations)}", *[_cell(v.mean(k)) for k in keys], ""])


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def failure_notes(variants: Sequence[VariantResult]) -> list[str]:
    """One line per variant whose conversations or evaluators failed (they are left out, never scored 0)."""
    notes = []
    for v in variants:
        failed = [c.key for c in v.conversations if c.error]
        if failed:
            notes.append(f"{v.variant}: {len(failed)} conversation(s) failed and are not scored: {', '.join(failed)}.")
        broken = [f"{c.key} ({e})" for c in v.conversations for e in c.evaluator_errors]
        if broken:
            notes.append(f"{v.variant}: evaluator errors, those metrics are missing: " + "; ".join(b[:200] for b in broken[:5]))
        skipped = sum(len(c.details.get("errors") or []) for c in v.conversations)
        if skipped:
            notes.append(f"{v.variant}: {skipped} fold(s) were skipped because the model's summary was invalid twice.")
    return notes
