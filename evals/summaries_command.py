"""``memory-agent eval summaries``: compare summary prompt variants on the production summarize path.

For every variant and conversation: replay through the production summarize
node (``summary_target``), then score with the plain evaluators
(``summary_evaluators``) inside one LangSmith experiment per variant
(``experiment``), aggregate over conversations with bootstrap CIs, name the best
variant only when the paired bootstrap says so, and write results.json,
results.csv, charts and report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console

import prompts
from evals.options import CompactionOverrides, ComparisonOptions, compaction_settings
from evals.datasets import load_dataset
from evals.eval_database import open_eval_workspace
from evals.experiment import ExampleSpec, langsmith_enabled
from evals.results import EvalResults, aggregate_variant, failure_notes
from evals.run_output import RunClock, comparison_results, default_out_dir, new_run_id, run_with_progress, write_comparison
from evals.summary_evaluators import SUMMARY_EVALUATORS, make_judge_evaluator
from evals.summary_records import reference_of
from evals.summary_target import SummaryRunSettings, make_summary_target
from llm.chat_model import OFFLINE, load_chat_model, model_label, resolve_model_name

__all__ = ["SummaryOptions", "run_summaries", "TABLE_KEYS", "WINNER_KEYS"]

TABLE_KEYS = ["retention", "judge", "rouge1", "rougeL", "stability", "summary_tokens", "compression_ratio", "seconds_per_fold", "cost_usd"]
WINNER_KEYS = ["retention", "judge", "rouge1", "rougeL", "stability"]
CHART_KEYS = ["retention", "judge", "rouge1", "rougeL", "stability", "summary_tokens", "compression_ratio", "seconds_per_fold"]


@dataclass(kw_only=True)
class SummaryOptions(ComparisonOptions):
    model: str | None = None
    reader_model: str | None = None
    judge_model: str | None = None
    compaction: CompactionOverrides = field(default_factory=CompactionOverrides)
    closing_fold: bool = True
    max_probes: int | None = None
    max_sessions: int | None = None  # cut each conversation after its first N sessions
    concurrency: int = 8
    experiment_prefix: str = "memory-agent-summaries"


def _notes(offline: bool, reader: str | None, judge: str | None, closing_fold: bool, max_sessions: int | None = None) -> list[str]:
    notes = []
    if max_sessions:
        notes.append(
            f"Each conversation was cut after its first {max_sessions} session(s); only probes whose evidence lies in "
            "the kept sessions were asked, and ROUGE compares with the kept sessions' summaries only (whole-conversation "
            "references were dropped)."
        )
    if offline:
        notes.append(
            "OFFLINE RUN: the summarizer was the built-in offline model, whose folds are the extractive fallback "
            "(offline_model/extractive_summary.py). It does not read the prompt text, so this run measures the fallback, "
            "not the prompt variants; identical scores across variants are expected. Run with a real model "
            "(OPENAI_API_KEY or OPENAI_BASE_URL, or --model) to compare the prompts."
        )
    if reader is None:
        notes.append(
            "No reader model: Retention is lexical recall (share of each gold answer's content words found in the "
            "final summary), an upper bound on what a reader could answer, not LoCoMo token F1."
        )
    else:
        notes.append(f"Retention is LoCoMo token F1 of answers by the reader model `{reader}` from the final summary alone.")
    if judge:
        notes.append(f"LLM judge: `{judge}` labels each reader answer CORRECT or WRONG (generous, Mem0-style).")
    if closing_fold:
        notes.append(
            "A closing fold (same node, window = tail = 1) folded the last raw messages, so the final summary covers "
            "the whole conversation; in a live chat those messages would still be raw in the prompt."
        )
    return notes


async def run_summaries(opts: SummaryOptions, console: Console) -> EvalResults:
    for v in opts.variants:
        prompts.summary_variant(v)  # raises with the list of known variants
    conversations = load_dataset(opts.dataset, limit=opts.limit)
    if not conversations:
        raise ValueError(f"dataset {opts.dataset!r} has no conversations")
    if opts.max_sessions:
        conversations = [c.first_sessions(opts.max_sessions) for c in conversations]
    model_spec = resolve_model_name(opts.model)
    offline = model_spec == OFFLINE
    reader_spec = opts.reader_model or (None if offline else model_spec) or opts.judge_model
    judge = load_chat_model(opts.judge_model) if opts.judge_model else None
    run_id = new_run_id()
    out_dir = opts.out or default_out_dir("summaries", run_id)
    clock = RunClock()

    examples = []
    for c in conversations:
        reference = reference_of(c, opts.max_probes)
        questions = [{"question_id": p.question_id, "question": p.question} for p in reference.probes]
        examples.append(
            ExampleSpec(
                key=c.id,
                inputs={"key": c.id, "conversation": c.model_dump(mode="json"), "questions": questions},
                outputs=reference.model_dump(mode="json"),
            )
        )
    evaluators = list(SUMMARY_EVALUATORS)
    if judge is not None:
        evaluators.append(make_judge_evaluator(judge, opts.concurrency))

    async with open_eval_workspace(run_id, opts.database_url) as workspace:
        settings = SummaryRunSettings(
            model=model_spec,
            context=opts.compaction.context(workspace.user("summaries")),
            run_id=run_id,
            reader_model=reader_spec,
            closing_fold=opts.closing_fold,
            concurrency=opts.concurrency,
        )
        runs, ls_dataset = await run_with_progress(
            opts,
            console,
            kind="summaries",
            variants=opts.variants,
            examples=examples,
            evaluators=evaluators,
            metadata={"model": model_spec, "reader": reader_spec, "window": settings.context.summary_window, "tail": settings.context.tail_size},
            turns=sum(c.n_turns for c in conversations),
            make_target=lambda variant, tracker: make_summary_target(settings, workspace.store, variant, tracker),
        )

    probes_asked = {e.key: len(e.outputs["probes"]) for e in examples}
    variants = [
        aggregate_variant(
            run,
            {
                r.key: {
                    "sample": (r.outputs or {}).get("summary", ""),
                    "errors": (r.outputs or {}).get("errors", []),
                    "messages": (r.outputs or {}).get("messages"),
                    "probes": probes_asked.get(r.key),
                }
                for r in run.rows
            },
            seed=opts.seed,
        )
        for run in runs
    ]
    results = comparison_results(
        opts,
        variants,
        winner_keys=WINNER_KEYS,
        langsmith_dataset=ls_dataset,
        clock=clock,
        command="summaries",
        conversations=[c.id for c in conversations],
        model=model_label(load_chat_model(model_spec)),
        offline=offline,
        settings={
            **compaction_settings(settings.context),
            "closing_fold": opts.closing_fold,
            "reader_model": reader_spec,
            "judge_model": opts.judge_model,
            "max_probes_per_conversation": opts.max_probes,
            "max_sessions": opts.max_sessions,
            "bootstrap": "2000 resamples over conversations, seed %d" % opts.seed,
        },
        primary_metric="retention",
        notes=_notes(offline, reader_spec, opts.judge_model, opts.closing_fold, opts.max_sessions)
        + failure_notes(variants)
        + ([] if (ls_dataset or not langsmith_enabled()) else ["LANGSMITH_API_KEY is set but upload was turned off."]),
    )
    write_comparison(results, out_dir, console, table_keys=TABLE_KEYS, chart_keys=CHART_KEYS, scatter=True)
    return results

