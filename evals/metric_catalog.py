"""What each reported number is called, which way is better, and how to print it.

Every evaluator returns scores under these keys; the table, the CSV, the charts
and the report all read labels and directions from here, so a number means the
same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from evals.datasets.schema import CATEGORY_NAMES

__all__ = ["MetricSpec", "METRICS", "metric", "ordered_keys"]


@dataclass(frozen=True)
class MetricSpec:
    key: str
    label: str
    higher_is_better: bool | None  # None: descriptive, no direction
    fmt: str = "{:.3f}"
    description: str = ""
    short_label: str = ""  # column title in the terminal table

    @property
    def short(self) -> str:
        return self.short_label or self.label

    def format(self, value: float | None) -> str:
        return "n/a" if value is None else self.fmt.format(value)


def _category_metrics(prefix: str, label: str) -> list[MetricSpec]:
    return [
        MetricSpec(f"{prefix}_cat{c}", f"{label} cat {c} ({CATEGORY_NAMES[c]})", True)
        for c in (0, 1, 2, 3, 4)
    ]


_ALL: list[MetricSpec] = [
    # --- summaries: retention
    MetricSpec(
        "retention",
        "Retention",
        True,
        description="Probe questions (all but adversarial) answered from the final summary alone: token F1 of "
        "the reader's answers when a reader model ran, else lexical recall of the gold answer in the summary.",
        short_label="Retention",
    ),
    MetricSpec("retention_f1", "Retention (reader token F1)", True, description="LoCoMo token F1 of answers read from the summary."),
    *_category_metrics("retention_f1", "Reader F1"),
    MetricSpec("judge", "LLM judge (share CORRECT)", True, description="Judge model's CORRECT rate on the reader's answers.", short_label="Judge"),
    *_category_metrics("judge", "Judge"),
    MetricSpec(
        "retention_lexical",
        "Lexical recall",
        True,
        description="Share of the gold answer's content words present in the summary (no model involved).",
    ),
    *_category_metrics("retention_lexical", "Lexical recall"),
    MetricSpec("adversarial_refusal", "Adversarial refusals (cat 5)", True, description="Share of unanswerable questions the reader refused."),
    # --- summaries: agreement with references
    MetricSpec("rouge1", "ROUGE-1 F", True, short_label="R-1"),
    MetricSpec("rouge2", "ROUGE-2 F", True),
    MetricSpec("rougeL", "ROUGE-L F", True, short_label="R-L"),
    # --- summaries: stability
    MetricSpec(
        "stability",
        "Stability (survive to end)",
        True,
        description="Share of the items (key facts, summary sentences) of each earlier fold still found in the final summary.",
        short_label="Stability",
    ),
    MetricSpec("fold_retention", "Kept by next fold", True, description="Share of a fold's items still found one fold later."),
    # --- summaries: cost
    MetricSpec("summary_tokens", "Summary tokens", False, "{:.0f}", short_label="Sum. tokens"),
    MetricSpec("compression_ratio", "Compression (conv ÷ summary)", None, "{:.1f}", short_label="Compress."),
    MetricSpec("folds", "Folds", None, "{:.1f}"),
    MetricSpec("model_calls", "Model calls", False, "{:.1f}"),
    MetricSpec("input_tokens", "Input tokens", False, "{:.0f}"),
    MetricSpec("output_tokens", "Output tokens", False, "{:.0f}"),
    MetricSpec(
        "seconds_per_fold",
        "Seconds per fold (model)",
        False,
        "{:.2f}",
        description="Wall time of the fold's model calls (fold, re-compression, repairs).",
        short_label="s/fold",
    ),
    MetricSpec(
        "node_seconds_per_fold",
        "Seconds per fold (whole node)",
        False,
        "{:.2f}",
        description="Wall time of the summary nodes' runs that folded (fold, chat record, index), store writes and chat title included "
        "(the embedding cache makes a variant faster when an earlier one wrote the same texts).",
    ),
    MetricSpec("cost_usd", "Estimated cost (USD)", False, "{:.4f}", short_label="USD"),
    # --- extraction
    MetricSpec("fact_f1", "Fact F1", True, short_label="F1"),
    MetricSpec("fact_precision", "Fact precision", True, short_label="Precision"),
    MetricSpec("fact_recall", "Fact recall", True, short_label="Recall"),
    MetricSpec("facts_extracted", "Facts extracted", None, "{:.1f}", short_label="Facts"),
    MetricSpec("gold_facts", "Gold facts", None, "{:.1f}"),
    MetricSpec("duplicates", "Duplicates", False, "{:.1f}", short_label="Dups"),
    MetricSpec("writer_merged", "Merged by writer", None, "{:.1f}"),
    MetricSpec("writer_dropped", "Exact repeats dropped by writer", None, "{:.1f}"),
    MetricSpec("extraction_failures", "Invalid extractions", False, "{:.1f}"),
    MetricSpec("extract_calls", "Extraction calls", False, "{:.1f}"),
    MetricSpec("extract_input_tokens", "Extraction input tokens", False, "{:.0f}"),
    MetricSpec("extract_output_tokens", "Extraction output tokens", False, "{:.0f}"),
    MetricSpec("extract_cost_usd", "Estimated cost (USD)", False, "{:.4f}", short_label="USD"),
]

METRICS: dict[str, MetricSpec] = {m.key: m for m in _ALL}


def metric(key: str) -> MetricSpec:
    return METRICS.get(key) or MetricSpec(key, key, None)


def ordered_keys(keys: set[str] | list[str]) -> list[str]:
    """Catalogue order first, unknown keys after (sorted)."""
    present = set(keys)
    known = [k for k in METRICS if k in present]
    return known + sorted(present - set(known))
