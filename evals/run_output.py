"""A comparison run's bookkeeping: its id and clock, its experiments with progress bars, its results and where
they are written (results.json, results.csv, charts, report.md)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from evals.charts import bar_chart, retention_vs_tokens
from evals.datasets.paths import REPO_ROOT
from evals.report import comparison_report
from evals.experiment import ExampleSpec, ExperimentRun, run_experiments
from evals.options import ComparisonOptions
from evals.results import EvalResults, VariantResult, judge_variants, write_csv
from evals.terminal import ProgressTracker, progress_tracker, results_table

__all__ = ["RunClock", "comparison_results", "default_out_dir", "new_run_id", "run_with_progress", "write_comparison", "write_results_json"]


def new_run_id() -> str:
    """Short, sortable, unique: used in user ids, thread ids and folder names."""
    return datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S") + secrets.token_hex(2)


def default_out_dir(command: str, run_id: str) -> Path:
    """``eval-results/<command>-<run id>`` in the repository (git-ignored)."""
    return REPO_ROOT / "eval-results" / f"{command}-{run_id}"


def write_results_json(results: Any, out_dir: Path) -> Path:
    """``results.json`` (a pydantic model, indented) in ``out_dir``, created when missing; ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(results.model_dump_json(indent=2), encoding="utf-8")
    return out_dir


class RunClock:
    def __init__(self) -> None:
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._start

    def timing(self) -> dict[str, Any]:
        """``started_at`` and ``wall_seconds`` (to a tenth) for a results model."""
        return {"started_at": self.started_at, "wall_seconds": round(self.seconds(), 1)}


async def run_with_progress(
    opts: ComparisonOptions,
    console: Console,
    *,
    kind: str,
    variants: Sequence[str],
    examples: Sequence[ExampleSpec],
    evaluators: Sequence[Callable[..., Any]],
    metadata: dict[str, Any],
    turns: int,
    make_target: Callable[[str, ProgressTracker], Callable[[dict], Awaitable[dict]]],
) -> tuple[list[ExperimentRun], str | None]:
    """``run_experiments`` with one progress bar a variant, ``turns`` long, which the variant's target advances."""
    with progress_tracker(console, opts.progress) as tracker:
        for v in variants:
            tracker.add(v, turns)
        runs, langsmith_dataset = await run_experiments(
            kind=kind,
            dataset_label=Path(opts.dataset).stem,
            variants=variants,
            examples=examples,
            make_target=lambda variant: make_target(variant, tracker),
            evaluators=evaluators,
            experiment_prefix=opts.experiment_prefix,
            metadata=metadata,
            upload=opts.upload,
        )
        for v in variants:
            tracker.finish(v)
    return runs, langsmith_dataset


def comparison_results(
    opts: ComparisonOptions, variants: list[VariantResult], *, winner_keys: Sequence[str], langsmith_dataset: str | None, clock: RunClock, **fields: Any
) -> EvalResults:
    """The results of a variant comparison: the winners by the paired bootstrap, where it went, how long it took."""
    return EvalResults(
        dataset=opts.dataset,
        variants=variants,
        winners=judge_variants(variants, winner_keys, seed=opts.seed),
        langsmith_dataset=langsmith_dataset,
        langsmith_uploaded=langsmith_dataset is not None,
        started_at=clock.started_at,
        wall_seconds=clock.seconds(),
        **fields,
    )


def write_comparison(
    results: EvalResults,
    out_dir: Path,
    console: Console,
    *,
    table_keys: Sequence[str],
    chart_keys: Sequence[str],
    scatter: bool,
) -> dict[str, Path]:
    """Write every file of a variant comparison and print the table and verdicts; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths["json"] = out_dir / "results.json"
    paths["json"].write_text(results.model_dump_json(indent=2), encoding="utf-8")
    paths["csv"] = out_dir / "results.csv"
    write_csv(results, paths["csv"])
    charts: list[Path] = []
    if scatter and (p := retention_vs_tokens(results.variants, out_dir / "retention_vs_tokens.png")):
        charts.append(p)
    for key in chart_keys:
        if p := bar_chart(results.variants, key, out_dir / f"metric_{key}.png"):
            charts.append(p)
    paths["report"] = out_dir / "report.md"
    paths["report"].write_text(comparison_report(results, [c.name for c in charts]), encoding="utf-8")

    console.print(results_table(results, table_keys))
    for w in results.winners.values():
        console.print(("[bold green]" if w.significant else "[bold yellow]") + w.verdict + "[/]")
    for note in results.notes:
        console.print(f"[dim]{note}[/]")
    console.print(f"Wrote {paths['report']}, {paths['json'].name}, {paths['csv'].name} and {len(charts)} charts in {out_dir}")
    return paths
