"""``memory-agent eval``: summaries, extraction, tokens.

    memory-agent eval summaries  --variants structured,narrative,fact_preserving [--dataset NAME|PATH]
                                 [--model M] [--reader-model R] [--judge-model J] [--limit N] [--out DIR]
    memory-agent eval extraction --variants offline,openai:gpt-4.1-mini [--dataset ...] [--threshold 0.7]
    memory-agent eval tokens     --dataset PATH [--limit N] [--max-turns N]
    memory-agent eval retrieval  [--dataset PATH] [--calibrate]
    memory-agent eval chats      [--dataset PATH] [--model M] [--limit N]
    memory-agent eval recall     [--dataset PATH] [--limit N] [--conversations 0,1,..] [--split 0,1,..] [--prompt-budget N] [--model M] [--reader-model R [--reader-questions N]] [--judge-model J]

See evals/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import prompts
from evals.datasets import DATASETS

if TYPE_CHECKING:
    from evals.options import CompactionOverrides

__all__ = ["build_parser", "main"]


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give at least one name")
    return items


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n


def _threshold(value: str) -> float:
    x = float(value)
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError("must be in (0, 1]")
    return x


def _common(p: argparse.ArgumentParser, *, default_dataset: str = "builtin") -> None:
    p.add_argument(
        "--dataset",
        default=default_dataset,
        help=f"a dataset name ({', '.join(DATASETS)}) or a path to a .json/.jsonl file (default: {default_dataset})",
    )
    p.add_argument("--limit", type=_positive, help="use only the first N conversations")
    p.add_argument("--out", type=out_folder, help="output folder (default: eval-results/<command>-<run id>)")
    p.add_argument(
        "--database-url",
        help="Postgres the eval writes to (default: a 'memory_agent_eval' "
        "database next to the agent's own); everything the run writes is deleted at its end",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def _compaction(p: argparse.ArgumentParser) -> None:
    # No numbers here: they went stale when Context's changed (the run's report gives the values used).
    p.add_argument("--window", type=_positive, help="Context.summary_window: fold once more messages are unsummarized (default: the Context's)")
    p.add_argument("--tail", type=_positive, help="Context.tail_size: newest messages kept raw after a fold (default: the Context's)")
    p.add_argument("--max-context-tokens", type=_positive, help="Context.max_context_tokens (default: the Context's)")
    p.add_argument("--max-summary-tokens", type=_positive, help="Context.max_summary_tokens (default: the Context's)")


def _langsmith(p: argparse.ArgumentParser, prefix: str) -> None:
    p.add_argument("--experiment-prefix", default=prefix, help=f"LangSmith experiment prefix (default {prefix})")
    p.add_argument("--no-upload", action="store_true", help="never upload to LangSmith, even with LANGSMITH_API_KEY set")


def out_folder(value: str) -> Path:
    """An output folder: refused at once when the path is a file (the run wrote its results only at
    its end, and failed there), or empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    path = Path(value)
    nearest = next((p for p in (path, *path.parents) if p.exists()), None)  # what mkdir would build on
    if nearest is not None and not nearest.is_dir():
        raise argparse.ArgumentTypeError(f"{nearest} is a file; give a folder for the results")
    # A folder that cannot be made or written failed the same way at the end; trying is the only sure
    # check (permissions, a read-only disk). What the try made is removed: the run makes it again.
    missing = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write the results in {path}: {exc.strerror or exc}") from exc
    finally:
        for p in missing:
            with contextlib.suppress(OSError):
                p.rmdir()
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-agent eval", description="Evaluate summarization prompts, memory extraction, token savings, knowledge retrieval and finding chats.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the eval does")
    sub = parser.add_subparsers(dest="eval_command", required=True)

    variants = ", ".join(prompts.summary_variants())
    s = sub.add_parser("summaries", help="compare summary prompt variants on the production summarize node")
    s.add_argument("--variants", type=_csv, default=list(prompts.summary_variants()), help=f"comma-separated prompt variants (default: all: {variants})")
    s.add_argument("--model", help="summarizer model (default: $MEMORY_AGENT_MODEL or auto: OpenAI when configured, else offline)")
    s.add_argument("--reader-model", help="model answering probe questions from the summary (default: --model unless offline)")
    s.add_argument("--judge-model", help="model labelling the reader's answers CORRECT/WRONG (default: no judge)")
    s.add_argument("--max-probes", type=_positive, help="at most N probe questions per conversation (reader/judge cost)")
    s.add_argument("--max-sessions", type=_positive, help="cut each conversation after its first N sessions (probes kept only when their evidence lies there)")
    s.add_argument("--no-closing-fold", action="store_true", help="do not fold the last raw messages at the end")
    s.add_argument("--concurrency", type=_positive, default=8, help="parallel reader/judge calls (default 8)")
    _common(s)
    _compaction(s)
    _langsmith(s, "memory-agent-summaries")

    e = sub.add_parser("extraction", help="precision/recall of extracted facts against gold facts")
    e.add_argument("--variants", type=_csv, help="comma-separated chat model specs to compare (default: --model)")
    e.add_argument("--model", help="model when --variants is not given (default: $MEMORY_AGENT_MODEL or auto)")
    e.add_argument("--threshold", type=_threshold, default=0.7, help="MiniLM cosine at which an extracted fact matches a gold fact (default 0.7)")
    e.add_argument("--duplicate-threshold", type=_threshold, default=0.85, help="cosine at which two stored facts count as duplicates (default 0.85)")
    e.add_argument("--max-turns", type=_positive, help="replay only the first N turns of each conversation (gold facts limited to them)")
    e.add_argument("--speakers", choices=["all", "first"], default="all", help="extract for every speaker with gold facts, or the first only")
    _common(e)
    _langsmith(e, "memory-agent-extraction")

    t = sub.add_parser("tokens", help="prompt tokens the full graph sends per turn vs the full history")
    t.add_argument("--model", default="offline", help="chat model for the replay (default: offline)")
    t.add_argument("--max-turns", type=_positive, help="replay only the first N user turns of each conversation")
    _common(t, default_dataset="builtin")
    _compaction(t)

    r = sub.add_parser("retrieval", help="knowledge given to related vs unrelated messages (the relevance gate)")
    r.add_argument("--dataset", type=Path, help="a labelled retrieval set (default: evals/data/retrieval_queries.json)")
    r.add_argument("--calibrate", action="store_true", help="also fit the gate's floors on the calibration split and print them")
    r.add_argument("--out", type=out_folder, help="output folder (default: eval-results/retrieval-<run id>)")
    r.add_argument("--database-url", help="Postgres the eval writes to (default as for the other commands); its collection is removed at the end")

    c = sub.add_parser("chats", help="finding a chat from a paraphrased request (top-1), before any fold")
    c.add_argument("--dataset", type=Path, help="a chat-finding set (default: evals/data/chat_finding.json)")
    c.add_argument("--model", default="offline", help="chat model the chats are replayed with (default: offline)")
    c.add_argument("--limit", type=_positive, help="use only the first N chats (and the requests for them)")
    c.add_argument("--out", type=out_folder, help="output folder (default: eval-results/chats-<run id>)")
    c.add_argument("--database-url", help="Postgres the eval writes to (default as for the other commands); its user is deleted at the end")

    rc = sub.add_parser("recall", help="what of the answer reaches the reply prompt (LoCoMo imported, judge-free), vs baselines")
    rc.add_argument("--dataset", help="a file in LoCoMo's format (default: <evaldata>/locomo7.json)")
    rc.add_argument("--limit", type=_positive, help="use only the first N conversations")
    rc.add_argument("--model", default="offline", help="the chat's model while importing (summaries, extraction; default: offline)")
    rc.add_argument("--reader-model", help="the reader check: answer a fixed sample of questions from some systems' prompts, report LoCoMo F1")
    rc.add_argument("--reader-questions", type=_non_negative, default=100, help="the reader's sample: N questions evenly spaced over the held-out part (default 100; 0: all)")
    rc.add_argument("--reader-systems", type=_names, default=["memory-agent", "bm25_turns"], help="the systems the reader answers from (default memory-agent,bm25_turns)")
    rc.add_argument("--judge-model", help="with --reader-model: label the answers CORRECT/WRONG too")
    rc.add_argument("--concurrency", type=_positive, default=1, help="reader/judge calls at once (default 1: a local server answers one at a time and keeps its cache for the next)")
    rc.add_argument("--conversations-at-once", type=_positive, default=1, help="import and question N conversations at once (faster; load_context times then include the contention)")
    rc.add_argument("--conversations", type=_names, help="only these conversations: comma-separated 0-based indices or ids (default: all)")
    rc.add_argument("--split", type=_names, help="the conversations settings were chosen on (indices or ids): tables are given for them and for the rest, held out")
    rc.add_argument("--prompt-budget", type=_positive, help="the reply prompt's whole budget in tokens for the questions (default: Context's, 2,000; the excerpts may take what the other sections leave, up to 8,000); the baselines get the memory-agent's median as always")
    rc.add_argument("--out", type=out_folder, help="output folder (default: eval-results/recall-<run id>)")
    rc.add_argument("--database-url", help="Postgres the eval writes to (default as for the other commands); its users are deleted at the end")
    rc.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")
    return parser


def _names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one index or id")
    return names


def _common_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options every command takes (see ``_common``)."""
    return {"dataset": args.dataset, "limit": args.limit, "out": args.out, "database_url": args.database_url, "progress": not args.no_progress}


def _compaction_options(args: argparse.Namespace) -> CompactionOverrides:
    from evals.options import CompactionOverrides  # imports the graph's Context: only for a run, not --help

    return CompactionOverrides(window=args.window, tail=args.tail, max_context_tokens=args.max_context_tokens, max_summary_tokens=args.max_summary_tokens)


def _experiment_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of the commands that compare variants in LangSmith experiments with bootstrap CIs."""
    return {"experiment_prefix": args.experiment_prefix, "seed": args.seed, "upload": False if args.no_upload else None}


async def _run(args: argparse.Namespace) -> int:
    from evals.terminal import make_console

    console = make_console()
    if args.eval_command == "summaries":
        from evals.summaries_command import SummaryOptions, run_summaries

        options = SummaryOptions(
            variants=args.variants,
            model=args.model,
            reader_model=args.reader_model,
            judge_model=args.judge_model,
            compaction=_compaction_options(args),
            closing_fold=not args.no_closing_fold,
            max_probes=args.max_probes,
            max_sessions=args.max_sessions,
            concurrency=args.concurrency,
            **_common_options(args),
            **_experiment_options(args),
        )
        return _status(await run_summaries(options, console))
    if args.eval_command == "extraction":
        from evals.extraction_command import ExtractionOptions, run_extraction

        options = ExtractionOptions(
            variants=args.variants or [args.model or "auto"],
            threshold=args.threshold,
            duplicate_threshold=args.duplicate_threshold,
            max_turns=args.max_turns,
            first_speaker_only=args.speakers == "first",
            **_common_options(args),
            **_experiment_options(args),
        )
        return _status(await run_extraction(options, console))
    if args.eval_command == "retrieval":
        from evals.retrieval_eval import RetrievalOptions, run_retrieval

        await run_retrieval(RetrievalOptions(dataset=args.dataset, out=args.out, database_url=args.database_url, calibrate=args.calibrate), console)
        return 0
    if args.eval_command == "chats":
        from evals.chat_finding_eval import ChatFindingOptions, run_chat_finding

        options = ChatFindingOptions(dataset=args.dataset, model=args.model, out=args.out, database_url=args.database_url, limit=args.limit)
        await run_chat_finding(options, console)
        return 0
    if args.eval_command == "recall":
        from core.context import SAFETY_CEILINGS
        from evals.recall_eval import SYSTEMS, RecallOptions, run_recall

        if args.judge_model and not args.reader_model:
            raise ValueError("--judge-model judges the reader's answers: give --reader-model too")
        if unknown := [s for s in args.reader_systems if s not in SYSTEMS]:  # before the import, not after it
            raise ValueError(f"--reader-systems: no system {', '.join(unknown)}; choose among {', '.join(SYSTEMS)}")
        if args.prompt_budget and args.prompt_budget > SAFETY_CEILINGS["prompt_token_budget"]:
            raise ValueError(f"--prompt-budget: at most {SAFETY_CEILINGS['prompt_token_budget']:,} tokens (the server's ceiling)")
        options = RecallOptions(
            model=args.model, reader_model=args.reader_model, judge_model=args.judge_model, concurrency=args.concurrency,
            reader_questions=args.reader_questions, reader_systems=tuple(args.reader_systems),
            conversations_at_once=args.conversations_at_once, conversations=args.conversations, split=args.split,
            prompt_token_budget=args.prompt_budget,
            **_common_options(args),
        )
        await run_recall(options, console)
        return 0
    from evals.token_savings import TokenOptions, run_token_savings

    options = TokenOptions(max_turns=args.max_turns, model=args.model, compaction=_compaction_options(args), **_common_options(args))
    await run_token_savings(options, console)
    return 0


def _status(results) -> int:
    """1 when no conversation of any variant could be scored (every target failed)."""
    scored = any(not c.error and c.scores for v in results.variants for c in v.conversations)
    return 0 if scored else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # The offline model's skipped folds and LangSmith's own notices are reported in the results instead.
        logging.getLogger("langsmith").setLevel(logging.ERROR)
    try:
        return asyncio.run(_run(args))
    except (ValueError, FileNotFoundError) as exc:  # unknown variant or dataset, missing file: say it plainly
        if args.verbose:
            raise
        parser.exit(2, f"error: {exc}\n")
    except KeyboardInterrupt:  # the run's users and threads were removed as its task was cancelled
        print("interrupted (Ctrl-C): no results were written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
