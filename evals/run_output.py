"""Where a run's files go and how they are written: results.json, results.csv, charts, report.md."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from evals.charts import bar_chart, retention_vs_tokens
from evals.datasets.paths import REPO_ROOT
from evals.report import comparison_report
from evals.results import EvalResults, write_csv
from evals.terminal import results_table

__all__ = ["RunClock", "default_out_dir", "new_run_id", "write_comparison"]


def new_run_id() -> str:
    """Short, sortable, unique: used in user ids, thread ids and folder names."""
    return datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S") + secrets.token_hex(2)


def default_out_dir(command: str, run_id: str) -> Path:
    """``eval-results/<command>-<run id>`` in the repository (git-ignored)."""
    return REPO_ROOT / "eval-results" / f"{command}-{run_id}"


class RunClock:
    def __init__(self) -> None:
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._start


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
