"""PNG charts of an eval run (matplotlib, Agg backend: no display needed).

* ``retention_vs_tokens.png``: one point per variant, mean summary tokens (x)
  against mean retention (y), with the retention CI as an error bar: the
  top-left is best (more kept in fewer tokens).
* ``metric_<key>.png``: one bar per variant with its 95% bootstrap CI.
* ``tokens_per_turn.png`` (tokens eval): prompt tokens sent vs the full history, per turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evals.metric_catalog import metric  # noqa: E402
from evals.results import VariantResult  # noqa: E402

__all__ = ["bar_chart", "recall_vs_tokens", "retention_vs_tokens", "tokens_per_turn_chart"]

_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def bar_chart(variants: Sequence[VariantResult], key: str, path: Path) -> Path | None:
    """Bar per variant with its CI; None when no variant has the metric."""
    shown = [v for v in variants if key in v.metrics]
    if not shown:
        return None
    spec = metric(key)
    means = [v.metrics[key].mean for v in shown]
    low = [v.metrics[key].mean - v.metrics[key].ci_low for v in shown]
    high = [v.metrics[key].ci_high - v.metrics[key].mean for v in shown]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(shown) + 2), 3.6))
    x = range(len(shown))
    ax.bar(x, means, yerr=[low, high], capsize=6, color=[_COLORS[i % len(_COLORS)] for i in x])
    ax.set_xticks(list(x), [v.variant for v in shown])
    direction = {True: " (higher is better)", False: " (lower is better)", None: ""}[spec.higher_is_better]
    ax.set_title(f"{spec.label}{direction}")
    ax.set_ylabel(spec.label)
    for i, m in enumerate(means):
        ax.annotate(spec.format(m), (i, m), ha="center", va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def retention_vs_tokens(variants: Sequence[VariantResult], path: Path, retention_key: str = "retention") -> Path | None:
    shown = [v for v in variants if retention_key in v.metrics and "summary_tokens" in v.metrics]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for i, v in enumerate(shown):
        r = v.metrics[retention_key]
        t = v.metrics["summary_tokens"]
        ax.errorbar(
            t.mean,
            r.mean,
            yerr=[[r.mean - r.ci_low], [r.ci_high - r.mean]],
            xerr=[[t.mean - t.ci_low], [t.ci_high - t.mean]],
            fmt="o",
            capsize=5,
            color=_COLORS[i % len(_COLORS)],
            label=v.variant,
        )
        # Staggered labels stay readable when variants land on the same point.
        ax.annotate(v.variant, (t.mean, r.mean), xytext=(6, 6 + 11 * i), textcoords="offset points", fontsize=9)
    ax.set_xlabel("Summary tokens (mean per conversation)")
    ax.set_ylabel(metric(retention_key).label)
    ax.set_title("Retention against summary size (top-left is best)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def tokens_per_turn_chart(sent: Sequence[int], full: Sequence[int], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    turns = range(1, len(sent) + 1)
    ax.plot(turns, full, label="full history + system", color=_COLORS[1])
    ax.plot(turns, sent, label="prompt the graph sent", color=_COLORS[0])
    ax.set_xlabel("User turn")
    ax.set_ylabel("Tokens (approx.)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def recall_vs_tokens(systems: dict[str, tuple[float, float, float | None]], path: Path) -> Path:
    """``eval recall``: each system's median prompt tokens (x, log scale) against answer words and
    evidence turns present (y): the top-left is best (more of the answer in fewer tokens)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (name, (tokens, answer, evidence)) in enumerate(systems.items()):
        color = _COLORS[i % len(_COLORS)]
        ax.scatter([tokens], [answer], color=color, marker="o", s=60, label=f"{name}: answer words")
        if evidence is not None:
            ax.scatter([tokens], [evidence], color=color, marker="^", s=60, label=f"{name}: evidence turns")
        ax.annotate(name, (tokens, answer), fontsize=8, xytext=(5, 5), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens (median)")
    ax.set_ylabel("share present in the prompt")
    ax.set_ylim(0, 1.05)
    ax.set_title("Recall against prompt size (o answer words, ^ evidence turns)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)
