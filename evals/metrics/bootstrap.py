"""Bootstrap confidence intervals and paired comparisons of eval variants.

Resample the *independent units* — conversations, not questions: questions
of one conversation share its memory and are not independent. Aggregate
per-question scores to per-conversation means first (``group_means``), then
bootstrap those. With 7 LoCoMo conversations the intervals are wide; that is
the point: a 1-point difference on 7 conversations is usually not a win.

All intervals are percentile intervals from ``n_resamples`` resamples drawn
with ``numpy.random.default_rng(seed)``, so results are reproducible.

``significant`` in ``decide_winner`` means only "the (1 - alpha) CI of the
paired difference excludes 0". It says nothing about the difference being
large enough to matter, and the percentile bootstrap is optimistic for very
few units (≈ 5-10), so treat borderline calls on tiny sets with care.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "PairedBootstrap",
    "WinnerDecision",
    "group_means",
    "bootstrap_ci",
    "bootstrap_diff",
    "decide_winner",
]

# keep each resampling block at about this many float64 values (~32 MB)
_BLOCK_ELEMENTS = 4_000_000


class PairedBootstrap(NamedTuple):
    """Result of ``bootstrap_diff(a, b)``: statistics of mean(a) - mean(b)."""

    mean_diff: float
    low: float
    high: float
    confidence: float  # fraction of resamples where mean(a) > mean(b)

    @property
    def significant(self) -> bool:
        """True when the CI excludes 0."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class WinnerDecision:
    best: str
    runner_up: str | None
    margin: float  # mean(best) - mean(runner_up); 0.0 with a single variant
    ci_low: float  # CI of the paired difference best - runner_up
    ci_high: float
    confidence: float  # fraction of resamples where best beat runner_up
    significant: bool  # CI excludes 0
    means: dict[str, float]
    n: int  # number of paired units (e.g. conversations)
    alpha: float

    def as_dict(self) -> dict:
        return asdict(self)


def _as_array(values: Sequence[float], name: str = "values") -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: nothing to bootstrap")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _check_params(n_resamples: int, alpha: float) -> None:
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")


def _resampled_means(arr: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = arr.size
    block = max(1, _BLOCK_ELEMENTS // n)
    out = np.empty(n_resamples, dtype=float)
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = arr[idx].mean(axis=1)
    return out


def _interval(means: np.ndarray, alpha: float) -> tuple[float, float]:
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def group_means(values: Sequence[float], groups: Sequence[Hashable]) -> dict[Hashable, float]:
    """Mean of ``values`` per group label (e.g. per conversation id), in first-seen order."""
    if len(values) != len(groups):
        raise ValueError(f"values ({len(values)}) and groups ({len(groups)}) differ in length")
    sums: dict[Hashable, float] = {}
    counts: dict[Hashable, int] = {}
    for v, g in zip(values, groups):
        sums[g] = sums.get(g, 0.0) + float(v)
        counts[g] = counts.get(g, 0) + 1
    return {g: sums[g] / counts[g] for g in sums}


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """``(mean, low, high)``: the sample mean and its percentile bootstrap CI."""
    _check_params(n_resamples, alpha)
    arr = _as_array(values)
    means = _resampled_means(arr, n_resamples, seed)
    low, high = _interval(means, alpha)
    return float(arr.mean()), low, high


def bootstrap_diff(
    a: Sequence[float],
    b: Sequence[float],
    n_resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> PairedBootstrap:
    """Paired bootstrap of mean(a) - mean(b).

    ``a[i]`` and ``b[i]`` must be scores of the same unit (conversation) under
    two variants; the same resampled units are used for both.
    """
    _check_params(n_resamples, alpha)
    arr_a, arr_b = _as_array(a, "a"), _as_array(b, "b")
    if arr_a.size != arr_b.size:
        raise ValueError(f"paired bootstrap needs equal lengths, got {arr_a.size} and {arr_b.size}")
    diffs = arr_a - arr_b
    means = _resampled_means(diffs, n_resamples, seed)
    low, high = _interval(means, alpha)
    confidence = float(np.mean(means > 0))
    return PairedBootstrap(float(diffs.mean()), low, high, confidence)


def decide_winner(
    per_variant_scores: Mapping[str, Sequence[float]],
    n_resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> WinnerDecision:
    """Pick the variant with the best mean and say whether its lead is real.

    ``per_variant_scores`` maps a variant name to its per-unit scores; every
    list must be aligned (same units, same order). The best mean wins (ties:
    the first variant listed); its lead over the runner-up is tested with
    ``bootstrap_diff(best, runner_up)``.
    """
    if not per_variant_scores:
        raise ValueError("no variants given")
    arrays = {name: _as_array(vals, f"scores of {name!r}") for name, vals in per_variant_scores.items()}
    lengths = {name: arr.size for name, arr in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"all variants must be scored on the same units; lengths: {lengths}")
    means = {name: float(arr.mean()) for name, arr in arrays.items()}
    ranked = sorted(means, key=lambda k: -means[k])  # stable: ties keep input order
    best = ranked[0]
    n = next(iter(lengths.values()))
    if len(ranked) == 1:
        return WinnerDecision(best, None, 0.0, 0.0, 0.0, 0.0, False, means, n, alpha)
    runner_up = ranked[1]
    diff = bootstrap_diff(arrays[best], arrays[runner_up], n_resamples=n_resamples, seed=seed, alpha=alpha)
    return WinnerDecision(
        best=best,
        runner_up=runner_up,
        margin=means[best] - means[runner_up],
        ci_low=diff.low,
        ci_high=diff.high,
        confidence=diff.confidence,
        significant=diff.significant,
        means=means,
        n=n,
        alpha=alpha,
    )
