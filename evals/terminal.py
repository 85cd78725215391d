"""What the terminal shows: a progress bar while a run goes, then a table of the headline figures."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from evals.metric_catalog import metric
from evals.results import EvalResults

__all__ = ["ProgressTracker", "make_console", "progress_tracker", "results_table"]


def make_console() -> Console:
    # Bound to the real stdout now: LangSmith's own prints are captured while experiments run.
    return Console(file=sys.stdout, highlight=False)


class ProgressTracker:
    """One bar per task (e.g. per variant), advanced by replayed turns.

    On a terminal the bars are live; in a log (no terminal) one line is printed
    per finished conversation instead, so a long run still shows where it is.
    """

    def __init__(self, progress: Progress | None, console: Console | None = None) -> None:
        self._progress = progress
        self._console = console
        self._live = progress is not None and console is not None and console.is_terminal
        self._tasks: dict[str, int] = {}
        self._done: dict[tuple[str, str], int] = {}
        self._started: dict[tuple[str, str], float] = {}

    def add(self, name: str, total: int) -> None:
        if self._progress is not None:
            # Started on its first turn, so each bar's clock shows its own time, not the wait for earlier ones.
            self._tasks[name] = self._progress.add_task(name, total=total, start=False)

    def turn(self, task: str, unit: str, n: int) -> None:
        """``n`` turns of ``unit`` (a conversation) are done in ``task``."""
        if self._progress is None or task not in self._tasks:
            return
        if not self._task(task).started:
            self._progress.start_task(self._tasks[task])
        previous = self._done.get((task, unit), 0)
        self._done[(task, unit)] = n
        self._progress.update(self._tasks[task], advance=max(0, n - previous), description=f"{task} · {unit}")
        self._started.setdefault((task, unit), time.perf_counter())

    def unit_done(self, task: str, unit: str, noun: str = "turns") -> None:
        """``unit`` (a conversation) of ``task`` is finished; in a log, say so with its time."""
        started = self._started.pop((task, unit), None)
        if self._live or self._console is None or started is None:
            return
        self._console.print(f"{task} · {unit}: {self._done.get((task, unit), 0)} {noun} in {time.perf_counter() - started:.0f} s")

    def finish(self, task: str) -> None:
        if self._progress is not None and task in self._tasks:
            self._progress.update(self._tasks[task], completed=self._task(task).total, description=task)

    def _task(self, name: str):
        return next(t for t in self._progress.tasks if t.id == self._tasks[name])


@contextmanager
def progress_tracker(console: Console, enabled: bool = True) -> Iterator[ProgressTracker]:
    if not enabled:
        yield ProgressTracker(None)
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("turns"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=not console.is_terminal,  # in a log: the per-conversation lines instead
    )
    with progress:
        yield ProgressTracker(progress, console)


def results_table(results: EvalResults, keys: Sequence[str]) -> Table:
    """Variants as rows, headline metrics as columns (mean ± half the 95% CI); the best mean of each column in green."""
    shown = [k for k in keys if any(k in v.metrics for v in results.variants)]
    table = Table(title=f"{results.command} on {results.dataset} ({len(results.conversations)} conversations, model {results.model})")
    # The name is what tells the rows apart: never cut it ("struct…" twice), let the numbers wrap instead.
    table.add_column("variant", style="bold", no_wrap=True, min_width=max((len(v.variant) for v in results.variants), default=7))
    for k in shown:
        table.add_column(metric(k).short, justify="right")
    for v in results.variants:
        cells = []
        for k in shown:
            m = v.metrics.get(k)
            if m is None:
                cells.append("n/a")
                continue
            spec = metric(k)
            text = spec.format(m.mean)
            if m.n > 1 and m.ci_high > m.ci_low:
                text += f" ±{spec.format((m.ci_high - m.ci_low) / 2)}"
            if _is_best(results, k, v.variant):
                text = f"[bold green]{text}[/]"
            cells.append(text)
        table.add_row(v.variant, *cells)
    return table


def _is_best(results: EvalResults, key: str, variant: str) -> bool:
    spec = metric(key)
    if spec.higher_is_better is None or len(results.variants) < 2:
        return False
    means = {v.variant: v.mean(key) for v in results.variants if v.mean(key) is not None}
    if len(set(means.values())) < 2:
        return False
    best = max(means.values()) if spec.higher_is_better else min(means.values())
    return means.get(variant) == best
