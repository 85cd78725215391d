"""``memory-agent eval extraction``: how well the production extraction path finds the gold facts.

Gold facts: LoCoMo ``observation``, MSC ``persona_text``, our builtin set's
``gold_facts``. Variants are chat model specs (the extraction prompt has one
version); each runs as its own LangSmith experiment like the summaries eval.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from evals.datasets import load_dataset
from evals.eval_database import open_eval_workspace
from evals.experiment import ExampleSpec
from evals.options import ComparisonOptions
from evals.extraction_evaluators import extraction_cost, make_fact_match_evaluator
from evals.extraction_records import extraction_reference, speakers_to_replay
from evals.extraction_target import ExtractionRunSettings, make_extraction_target
from evals.results import EvalResults, aggregate_variant, failure_notes
from evals.run_output import RunClock, comparison_results, default_out_dir, new_run_id, run_with_progress, write_comparison
from llm.chat_model import OFFLINE, resolve_model_name
from embeddings import resolve_embeddings

__all__ = ["ExtractionOptions", "MATCH_EMBEDDINGS", "run_extraction"]

MATCH_EMBEDDINGS = "local:all-MiniLM-L6-v2"
TABLE_KEYS = ["fact_f1", "fact_precision", "fact_recall", "facts_extracted", "duplicates", "extract_cost_usd"]
CHART_KEYS = ["fact_f1", "fact_precision", "fact_recall", "facts_extracted", "duplicates"]
WINNER_KEYS = ["fact_f1", "fact_precision", "fact_recall"]


@dataclass(kw_only=True)
class ExtractionOptions(ComparisonOptions):
    threshold: float = 0.7
    duplicate_threshold: float = 0.85
    max_turns: int | None = None
    first_speaker_only: bool = False
    experiment_prefix: str = "memory-agent-extraction"


def _notes(opts: ExtractionOptions, offline: bool) -> list[str]:
    notes = [
        f"Matching: MiniLM ({MATCH_EMBEDDINGS}) cosine ≥ {opts.threshold} between a stored memory and a gold fact, "
        "one-to-one (most similar pairs first); "
        f"duplicates: two memories of one user at cosine ≥ {opts.duplicate_threshold}. Memories are the user's "
        "active facts plus profile fields and preference notes written as sentences; the speaker's name is put "
        "in front of a memory that lacks it (gold facts name the person).",
        "Each speaker with gold facts is replayed as the user (the other speaker's turns are the assistant's "
        "replies), into a user of its own; precision and recall pool the speakers of a conversation.",
    ]
    if offline:
        notes.insert(
            0,
            "OFFLINE RUN: extraction was done by the offline model's rules (offline_model/rule_extraction.py), not by an "
            "LLM reading prompts/extraction.md: this measures the rule fallback. Run with a real model to "
            "measure the prompt.",
        )
    if opts.max_turns:
        notes.append(f"Only the first {opts.max_turns} turns of each conversation were replayed; gold facts stated later are not counted.")
    return notes


async def run_extraction(opts: ExtractionOptions, console: Console) -> EvalResults:
    variants = [resolve_model_name(v) for v in opts.variants]
    conversations = load_dataset(opts.dataset, limit=opts.limit)
    plans = [(c, speakers_to_replay(c, opts.first_speaker_only)) for c in conversations]
    plans = [(c, s) for c, s in plans if s]
    if not plans:
        raise ValueError(f"dataset {opts.dataset!r} has no conversations with gold facts to extract")
    run_id = new_run_id()
    out_dir = opts.out or default_out_dir("extraction", run_id)
    clock = RunClock()
    matcher = resolve_embeddings(MATCH_EMBEDDINGS).embeddings

    examples = [
        ExampleSpec(
            key=c.id,
            inputs={"key": c.id, "conversation": c.model_dump(mode="json"), "speakers": speakers},
            outputs=extraction_reference(c, speakers).model_dump(mode="json"),
        )
        for c, speakers in plans
    ]
    evaluators = [make_fact_match_evaluator(matcher.embed_documents, opts.threshold, opts.duplicate_threshold), extraction_cost]
    settings = ExtractionRunSettings(run_id=run_id, max_turns=opts.max_turns)

    async with open_eval_workspace(run_id, opts.database_url) as workspace:
        runs, ls_dataset = await run_with_progress(
            opts,
            console,
            kind="extraction",
            variants=variants,
            examples=examples,
            evaluators=evaluators,
            metadata={"threshold": opts.threshold, "max_turns": opts.max_turns},
            turns=sum(min(c.n_turns, opts.max_turns or c.n_turns) * len(s) for c, s in plans),
            make_target=lambda variant, tracker: make_extraction_target(settings, workspace, variant, tracker),
        )

    def sample(outputs: dict | None) -> str:
        speakers = (outputs or {}).get("speakers") or []
        return "\n".join(f"[{s['speaker']}] {m}" for s in speakers for m in s["memories"][:15])

    aggregated = [aggregate_variant(run, {r.key: {"sample": sample(r.outputs)} for r in run.rows}, seed=opts.seed) for run in runs]
    results = comparison_results(
        opts,
        aggregated,
        winner_keys=WINNER_KEYS,
        langsmith_dataset=ls_dataset,
        clock=clock,
        command="extraction",
        conversations=[c.id for c, _ in plans],
        model=", ".join(variants),
        offline=all(v == OFFLINE for v in variants),
        settings={
            "match_embeddings": MATCH_EMBEDDINGS,
            "match_threshold": opts.threshold,
            "duplicate_threshold": opts.duplicate_threshold,
            "max_turns": opts.max_turns,
            "speakers": "first only" if opts.first_speaker_only else "every speaker with gold facts",
            "bootstrap": "2000 resamples over conversations, seed %d" % opts.seed,
        },
        primary_metric="fact_f1",
        notes=_notes(opts, all(v == OFFLINE for v in variants)) + failure_notes(aggregated),
    )
    write_comparison(results, out_dir, console, table_keys=TABLE_KEYS, chart_keys=CHART_KEYS, scatter=False)
    return results
