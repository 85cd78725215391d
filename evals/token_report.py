"""Files of the tokens eval: results.json, results.csv (one row per turn), per-conversation charts, report.md."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from evals.charts import tokens_per_turn_chart
from evals.token_results import ANCHOR, TokenResults, headline

__all__ = ["MAX_CHARTS", "token_report", "write_token_files"]

MAX_CHARTS = 8


def token_report(results: TokenResults, charts: list[str]) -> str:
    lines = [
        f"# Prompt tokens per turn: {results.dataset}",
        "",
        f"- Model: `{results.model}`; {len(results.conversations)} conversations, {len(results.turns)} user turns through the full graph",
        f"- Started {results.started_at}, took {results.wall_seconds / 60:.1f} min",
        *[f"- {k}: `{v}`" for k, v in results.settings.items()],
        "",
        "## Headline",
        "",
        f"**{headline(results)}**",
        "",
        ANCHOR,
        "",
        "## Per conversation",
        "",
        "| conversation | turns | folds | sent | full history | saved | last turn: sent / full | facts stored (superseded) | tasks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in results.conversations:
        lines.append(
            f"| {c.conversation} | {c.turns} | {c.folds} | {c.sent_total:,} | {c.full_total:,} | {c.saved:.1%} | {c.last_sent:,} / {c.last_full:,} "
            f"| {c.facts_active} ({c.facts_superseded}) | {c.tasks} |"
        )
    lines.append(
        f"| **total** | {len(results.turns)} | | {results.sent_total:,} | {results.full_total:,} | **{results.saved:.1%}** | "
        f"| {sum(c.facts_active for c in results.conversations)} ({sum(c.facts_superseded for c in results.conversations)}) "
        f"| {sum(c.tasks for c in results.conversations)} |"
    )
    lines.append("")
    refused = [t for t in results.turns if t.refused]
    if refused:
        lines += [f"{len(refused)} turn(s) were refused by input validation and count with the prompt they did not send.", ""]
    if charts:
        lines += ["## Charts", ""] + [f"![{c}]({c})" for c in charts] + [""]
    lines += ["## Notes", ""] + [f"- {n}" for n in results.notes] + [""]
    lines += [
        "## How to read it",
        "",
        "- **sent**: `turn_usage.prompt_tokens_estimated`, the prompt the reply node built this turn.",
        "- **full history**: the same system text plus every message of the thread up to this turn's user message.",
        "- **saved**: 1 − sent ÷ full, over all turns. Early turns save nothing (the history is short); the saving "
        "grows once the summary replaces old messages, so long conversations show it best.",
        "",
    ]
    return "\n".join(lines)


def write_token_files(results: TokenResults, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "report": out_dir / "report.md"}
    paths["json"].write_text(results.model_dump_json(indent=2), encoding="utf-8")
    with open(paths["csv"], "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["conversation", "turn", "sent", "model_input", "full", "summarized", "refused"])
        for t in results.turns:
            writer.writerow([t.conversation, t.turn, t.sent, t.model_input, t.full, int(t.summarized), t.refused or ""])
    charts: list[str] = []
    for c in results.conversations[:MAX_CHARTS]:
        turns = [t for t in results.turns if t.conversation == c.conversation]
        if not turns:
            continue
        name = "tokens_" + re.sub(r"[^\w.-]+", "_", c.conversation) + ".png"
        tokens_per_turn_chart([t.sent for t in turns], [t.full for t in turns], out_dir / name, f"{c.conversation}: {c.saved:.0%} saved")
        charts.append(name)
    paths["report"].write_text(token_report(results, charts), encoding="utf-8")
    return paths
