"""report.md of a variant comparison (summaries or extraction): verdict first, then the evidence."""

from __future__ import annotations

from collections.abc import Sequence

from evals.datasets.schema import CATEGORY_NAMES
from evals.metric_catalog import metric, ordered_keys
from evals.results import EvalResults

__all__ = ["comparison_report"]

TITLES = {"summaries": "Summary prompt variants", "extraction": "Memory extraction"}
CATEGORY_PREFIXES = (("retention_f1", "Reader token F1"), ("judge", "LLM judge"), ("retention_lexical", "Lexical recall"))
SAMPLE_CHARS = 1500


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]
    return out


def _cell(results: EvalResults, variant: str, key: str) -> str:
    m = results.variant(variant).metrics.get(key)
    if m is None:
        return "n/a"
    spec = metric(key)
    text = spec.format(m.mean)
    if m.n > 1 and m.ci_high > m.ci_low:
        text += f" [{spec.format(m.ci_low)}, {spec.format(m.ci_high)}]"
    return text


def _direction(key: str) -> str:
    return {True: "↑", False: "↓", None: ""}[metric(key).higher_is_better]


def _settings_lines(results: EvalResults) -> list[str]:
    lines = [
        f"- Dataset: `{results.dataset}`, {len(results.conversations)} conversations: {', '.join(results.conversations)}",
        f"- Model: `{results.model}`" + (" (the built-in offline model)" if results.offline else ""),
        f"- Variants: {', '.join(f'`{v.variant}`' for v in results.variants)}",
        f"- Started {results.started_at}, took {results.wall_seconds / 60:.1f} min",
    ]
    lines += [f"- {k}: `{v}`" for k, v in results.settings.items()]
    return lines


def _category_rows(results: EvalResults) -> list[list[str]]:
    rows = []
    for prefix, label in CATEGORY_PREFIXES:
        for c in sorted(CATEGORY_NAMES):
            key = f"{prefix}_cat{c}"
            if any(key in v.metrics for v in results.variants):
                rows.append([f"{label}, cat {c} {CATEGORY_NAMES[c]}", *[_cell(results, v.variant, key) for v in results.variants]])
    return rows


def comparison_report(results: EvalResults, charts: Sequence[str]) -> str:
    names = [v.variant for v in results.variants]
    lines = [f"# {TITLES.get(results.command, results.command)}: {results.dataset}", ""]
    lines += _settings_lines(results) + [""]

    lines += ["## Verdict", ""]
    primary = results.winners.get(results.primary_metric)
    if primary:
        lines += [f"**{primary.verdict}**", ""]
    others = [w for k, w in results.winners.items() if k != results.primary_metric]
    lines += [f"- {w.verdict}" for w in others]
    lines += [
        "",
        "A variant is called best only when the 95% bootstrap CI of its paired difference with the runner-up "
        "(resampling conversations, 2000 resamples) excludes 0; otherwise the leader is named with its margin "
        "and the share of resamples it led in.",
        "",
    ]
    if results.notes:
        lines += ["## Read this first", ""] + [f"- {n}" for n in results.notes] + [""]

    keys = ordered_keys({k for v in results.variants for k in v.metrics})
    lines += ["## Results", "", "Mean over conversations with its 95% bootstrap CI; ↑ higher is better, ↓ lower is better.", ""]
    lines += _md_table(["metric", *names], [[f"{metric(k).label} {_direction(k)}", *[_cell(results, n, k) for n in names]] for k in keys if "_cat" not in k])
    lines.append("")
    cat_rows = _category_rows(results)
    if cat_rows:
        lines += ["### By LoCoMo question category", "", "Adversarial questions (cat 5) are not in these numbers.", ""]
        lines += _md_table(["measure", *names], cat_rows) + [""]

    if charts:
        lines += ["## Charts", ""] + [f"![{c}]({c})" for c in charts] + [""]

    primary_key = results.primary_metric
    lines += [f"## Per conversation: {metric(primary_key).label}", ""]
    convs = results.conversations
    rows = []
    for key in convs:
        row = [key]
        for v in results.variants:
            c = next((c for c in v.conversations if c.key == key), None)
            if c is None or c.error:
                row.append(f"error: {c.error[:60]}" if c and c.error else "n/a")
            else:
                row.append(metric(primary_key).format(c.scores.get(primary_key)))
        rows.append(row)
    lines += _md_table(["conversation", *names], rows) + [""]

    samples = [(v.variant, v.conversations[0]) for v in results.variants if v.conversations and v.conversations[0].details.get("sample")]
    if samples:
        lines += [f"## Sample output: `{samples[0][1].key}`", ""]
        if len(samples) > 1 and len({str(c.details["sample"]) for _, c in samples}) == 1:
            samples = [(", ".join(n for n, _ in samples) + " (identical)", samples[0][1])]
        for name, c in samples:
            text = str(c.details["sample"])
            cut = text[:SAMPLE_CHARS] + (" …" if len(text) > SAMPLE_CHARS else "")
            lines += [f"**{name}**", "", "```text", cut, "```", ""]

    described = [k for k in keys if metric(k).description and "_cat" not in k]
    if described:
        lines += ["## What the numbers mean", ""] + [f"- **{metric(k).label}**: {metric(k).description}" for k in described] + [""]

    lines += ["## LangSmith", ""]
    if results.langsmith_uploaded:
        lines.append(f"Dataset `{results.langsmith_dataset}`; one experiment per variant:")
        lines += [f"- `{v.variant}`: {v.experiment_name}" + (f" — {v.url}" if v.url else "") for v in results.variants]
    else:
        lines.append(
            "Not uploaded (no `LANGSMITH_API_KEY`): the same `langsmith.aevaluate` experiments ran locally with "
            "`upload_results=False`. Set the key and re-run to get one experiment per variant on a shared dataset."
        )
    lines.append("")
    return "\n".join(lines)
