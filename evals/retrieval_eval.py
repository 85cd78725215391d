"""``memory-agent eval retrieval``: does knowledge reach the prompt only when the turn is related to it?

A labelled set (``evals/data/retrieval_queries.json``) of messages over documents the project
ships (README, ARCHITECTURE, the benchmark and eval READMEs, ``tests/fixtures/kb``), half of
them unrelated chit-chat. The corpus is ingested into a collection of its own in the eval
database (removed at the end) and every message goes through the production
``knowledge.search`` with the reply's defaults (``Context.rag_top_k`` chunks within
``Context.rag_token_budget``):

* unrelated with any chunk: unrelated messages that got at least one chunk (target ≤ 5 %);
* related hit at k: related messages whose labelled section (a source file and a heading path
  containing the label's heading) has a chunk among the ones given (target ≥ 90 %).

Both are reported with the relevance gate (what the agent does) and without it (``gate=None``,
the behaviour before the gate), per split. Every other message of each class is in the
*calibration* split, which ``--calibrate`` fits the gate's three similarity floors on; the *held-out* split
never influenced them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator
from rich.console import Console
from rich.table import Table

import knowledge
from core.context import Context
from evals.datasets._jsonl import read_json
from evals.datasets.paths import REPO_ROOT
from evals.eval_database import open_eval_workspace
from evals.run_output import RunClock, default_out_dir, new_run_id, write_results_json
from knowledge.hybrid_ranking import RelevanceGate

__all__ = [
    "DEFAULT_SET",
    "GateFit",
    "RetrievalOptions",
    "RetrievalResults",
    "RetrievalSet",
    "calibrate",
    "load_retrieval_set",
    "run_retrieval",
]

DEFAULT_SET = Path(__file__).resolve().parent / "data" / "retrieval_queries.json"
TARGET_UNRELATED = 0.05
TARGET_RELATED = 0.90
Split = Literal["calibration", "held_out"]
SPLITS: tuple[str, ...] = ("calibration", "held_out", "all")


class Label(BaseModel):
    source: str = Field(description="A corpus file, relative to the repository root.")
    heading: str = Field("", description="Text the chunk's heading path contains ('' = any chunk of the file).")


class RetrievalQuery(BaseModel):
    query: str
    related: bool
    relevant: list[Label] = Field(default_factory=list)
    split: Split

    @model_validator(mode="after")
    def _labels_match_kind(self) -> "RetrievalQuery":
        if self.related != bool(self.relevant):
            raise ValueError(f"{self.query!r}: a related query needs relevant sections, an unrelated one none")
        return self


class RetrievalSet(BaseModel):
    description: str = ""
    corpus: list[str] = Field(min_length=1, description="Files or folders, relative to the repository root.")
    queries: list[RetrievalQuery] = Field(min_length=1)


def load_retrieval_set(path: Path | None = None) -> RetrievalSet:
    path = Path(path or DEFAULT_SET)
    if not path.is_file():
        raise FileNotFoundError(f"retrieval set not found at {path.resolve()}")
    data = RetrievalSet.model_validate(read_json(path))
    missing = [c for c in data.corpus if not (REPO_ROOT / c).exists()]
    if missing:
        raise FileNotFoundError(f"corpus files of {path.name} not found under {REPO_ROOT}: {', '.join(missing)}")
    return data


def _same_file(chunk_source: str, label_source: str) -> bool:
    # Ingest names a file relative to the working directory when it lies under it, else absolutely.
    return Path(chunk_source).resolve() == (REPO_ROOT / label_source).resolve()


def is_relevant(chunk: knowledge.RetrievedChunk, labels: list[Label]) -> bool:
    return any(
        _same_file(chunk.source, label.source) and label.heading.casefold() in chunk.heading_path.casefold() for label in labels
    )


# --------------------------------------------------------------------------- results


class ChunkSeen(BaseModel):
    citation: str
    heading_path: str
    similarity: float | None
    text_match: bool
    coverage: float = 0.0
    whole_match: bool
    relevant: bool
    tokens: int


class QueryResult(BaseModel):
    query: str
    related: bool
    split: Split
    chunks: list[ChunkSeen]
    ungated_chunks: list[ChunkSeen]

    @property
    def ok(self) -> bool:
        return any(c.relevant for c in self.chunks) if self.related else not self.chunks

    @property
    def ok_ungated(self) -> bool:
        return any(c.relevant for c in self.ungated_chunks) if self.related else not self.ungated_chunks


class SplitFigures(BaseModel):
    split: str
    related: int
    unrelated: int
    related_hits: int
    unrelated_with_chunks: int
    related_hits_ungated: int
    unrelated_with_chunks_ungated: int
    unrelated_tokens_ungated: int = Field(description="Knowledge tokens the unrelated messages were given without the gate.")
    unrelated_tokens: int

    @property
    def related_hit_rate(self) -> float:
        return self.related_hits / self.related if self.related else 0.0

    @property
    def unrelated_rate(self) -> float:
        return self.unrelated_with_chunks / self.unrelated if self.unrelated else 0.0


class GateFit(BaseModel):
    """The gate ``--calibrate`` chose, and what it scored on the calibration split's candidates."""

    min_similarity: float
    min_similarity_text_match: float
    min_similarity_covered: float
    related_admitted: float = Field(description="Calibration related messages with a relevant candidate the gate admits.")
    unrelated_admitted: float = Field(description="Calibration unrelated messages with any candidate the gate admits.")
    tied: int = Field(description="Grid points with the same score; the widest margin among them is chosen.")


class RetrievalResults(BaseModel):
    command: str = "retrieval"
    dataset: str
    corpus: list[str]
    chunks: int
    embeddings: str
    gate: dict
    k: int
    token_budget: int
    figures: list[SplitFigures]
    calibration: GateFit | None = None
    queries: list[QueryResult]
    started_at: str
    wall_seconds: float


def split_figures(results: list[QueryResult], split: str) -> SplitFigures:
    chosen = [r for r in results if split == "all" or r.split == split]
    related = [r for r in chosen if r.related]
    unrelated = [r for r in chosen if not r.related]
    return SplitFigures(
        split=split,
        related=len(related),
        unrelated=len(unrelated),
        related_hits=sum(r.ok for r in related),
        unrelated_with_chunks=sum(not r.ok for r in unrelated),
        related_hits_ungated=sum(r.ok_ungated for r in related),
        unrelated_with_chunks_ungated=sum(not r.ok_ungated for r in unrelated),
        unrelated_tokens=sum(_tokens(r.chunks) for r in unrelated),
        unrelated_tokens_ungated=sum(_tokens(r.ungated_chunks) for r in unrelated),
    )


def _tokens(chunks: list[ChunkSeen]) -> int:
    return sum(c.tokens for c in chunks)


# --------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Candidate:
    """A fused candidate as the gate sees it, and whether the label says it is relevant."""

    similarity: float | None
    text_match: bool
    whole_match: bool
    relevant: bool
    coverage: float = 0.0


def _slack(gate: RelevanceGate, c: Candidate) -> float:
    """How far ``c`` is inside the gate (> 0 admitted, ≤ 0 refused), in cosine units."""
    if c.whole_match:
        return float("inf")
    if c.similarity is None:
        return float("-inf")
    slack = c.similarity - gate.min_similarity
    if c.text_match:
        slack = max(slack, c.similarity - gate.min_similarity_text_match)
        if c.coverage >= gate.min_coverage:
            slack = max(slack, c.similarity - gate.min_similarity_covered)
    return slack if slack != 0 else 1e-9  # on the floor is admitted


def _score(gate: RelevanceGate, samples: list[tuple[bool, list[Candidate]]]) -> tuple[float, float, float, float]:
    """(related admitted − unrelated admitted, margin, related admitted, unrelated admitted).

    The margin is the smallest distance, over the samples the gate gets right, between a
    floor and the candidate deciding the sample: how much the floors could move before
    one more calibration sample flips.
    """
    related = [cands for is_related, cands in samples if is_related]
    unrelated = [cands for is_related, cands in samples if not is_related]
    hits, leaks, margins = 0, 0, []
    for cands in related:
        best = max((_slack(gate, c) for c in cands if c.relevant), default=float("-inf"))
        if best > 0:
            hits += 1
            margins.append(best)
    for cands in unrelated:
        worst = max((_slack(gate, c) for c in cands), default=float("-inf"))
        if worst > 0:
            leaks += 1
        else:
            margins.append(-worst)
    hit, leak = hits / max(1, len(related)), leaks / max(1, len(unrelated))
    return round(hit - leak, 9), min(margins, default=0.0), hit, leak


def calibrate(samples: list[tuple[bool, list[Candidate]]], *, step: float = 0.01, min_coverage: float | None = None) -> GateFit:
    """Fit the gate's three similarity floors on ``(related, candidates)`` samples.

    Grid search (``step``) over ``min_similarity`` in [0.15, 0.70], ``min_similarity_text_match``
    in [0.05, min_similarity] and ``min_similarity_covered`` in [0.05, min_similarity_text_match]
    (``min_coverage`` stays as the gate has it): the most related samples with an admitted
    relevant candidate minus unrelated samples with any admitted candidate; among equally good
    floors, the widest margin (floors midway between the classes, not on the edge of one), then
    the lower floors. (:func:`_score` says the same for one gate; this is its vectorized form.)
    """
    coverage_floor = RelevanceGate().min_coverage if min_coverage is None else min_coverage

    def steps(lo: float, hi: float) -> list[float]:
        return [round(lo + i * step, 4) for i in range(int(round((hi - lo) / step)) + 1)]

    related_flags = [is_related for is_related, _ in samples]
    n_related = max(1, sum(related_flags))
    n_unrelated = max(1, len(samples) - sum(related_flags))
    # One row per candidate that can decide its sample: for a related sample its relevant
    # candidates, for an unrelated one all of them.
    rows = [
        (n, c)
        for n, (is_related, cands) in enumerate(samples)
        for c in cands
        if c.relevant or not is_related
    ]
    owner = np.array([n for n, _ in rows], dtype=np.int64)
    sim = np.array([-np.inf if c.similarity is None else c.similarity for _, c in rows], dtype=np.float64)
    text = np.array([c.text_match for _, c in rows], dtype=bool)
    covered = text & np.array([c.coverage >= coverage_floor for _, c in rows], dtype=bool)
    whole = np.array([c.whole_match for _, c in rows], dtype=bool)
    is_related = np.array(related_flags, dtype=bool)

    best_key = None
    tied = 0
    for high in steps(0.15, 0.70):
        grid = np.array([(low, cov) for low in steps(0.05, high) for cov in steps(0.05, low)], dtype=np.float64)
        low, cov = grid[:, :1], grid[:, 1:]
        slack = sim[None, :] - high
        slack = np.maximum(slack, np.where(text[None, :], sim[None, :] - low, -np.inf))
        slack = np.maximum(slack, np.where(covered[None, :], sim[None, :] - cov, -np.inf))
        slack = np.where(whole[None, :], np.inf, slack)
        slack = np.where(slack == 0, 1e-9, slack)
        deciding = np.full((len(grid), len(samples)), -np.inf)
        for n in range(len(samples)):
            mine = owner == n
            if mine.any():
                deciding[:, n] = slack[:, mine].max(axis=1)
        admitted = deciding > 0
        hits = (admitted & is_related[None, :]).sum(axis=1) / n_related
        leaks = (admitted & ~is_related[None, :]).sum(axis=1) / n_unrelated
        score = np.round(hits - leaks, 9)
        right = np.where(is_related[None, :], admitted, ~admitted)
        margin_each = np.where(is_related[None, :], deciding, -deciding)
        margin = np.where(right, margin_each, np.inf).min(axis=1)
        margin = np.where(np.isfinite(margin), margin, 0.0)
        for g in range(len(grid)):
            key = (float(score[g]), round(float(margin[g]), 6), -high, -float(grid[g, 0]), -float(grid[g, 1]))
            if best_key is None or key[0] > best_key[0][0]:
                best_key, tied = (key, float(hits[g]), float(leaks[g])), 1
            elif key[0] == best_key[0][0]:
                tied += 1
                if key > best_key[0]:
                    best_key = (key, float(hits[g]), float(leaks[g]))
    (_, _, high, low, cov), hit, leak = best_key
    return GateFit(
        min_similarity=-high, min_similarity_text_match=-low, min_similarity_covered=-cov,
        related_admitted=hit, unrelated_admitted=leak, tied=tied,
    )


# --------------------------------------------------------------------------- the run


@dataclass
class RetrievalOptions:
    dataset: Path | None = None
    out: Path | None = None
    database_url: str | None = None
    calibrate: bool = False


def _seen(chunk: knowledge.RetrievedChunk, labels: list[Label]) -> ChunkSeen:
    return ChunkSeen(
        citation=chunk.citation,
        heading_path=chunk.heading_path,
        similarity=None if chunk.vector_similarity is None else round(chunk.vector_similarity, 4),
        text_match=chunk.text_match,
        coverage=round(chunk.text_coverage, 4),
        whole_match=chunk.whole_match,
        relevant=is_relevant(chunk, labels),
        tokens=chunk.tokens,
    )


async def run_retrieval(opts: RetrievalOptions, console: Console) -> RetrievalResults:
    data = load_retrieval_set(opts.dataset)
    run_id = new_run_id()
    clock = RunClock()
    ctx = Context()
    collection = f"eval-retrieval-{run_id}"
    results: list[QueryResult] = []
    samples: list[tuple[RetrievalQuery, list[Candidate]]] = []
    async with open_eval_workspace(run_id, opts.database_url) as workspace:
        backend = workspace.backend
        pool, embeddings = backend.pool, backend.embeddings.embeddings
        try:
            console.print(f"Ingesting {', '.join(data.corpus)} into collection {collection} …")
            report = await knowledge.ingest(pool, embeddings, [REPO_ROOT / c for c in data.corpus], collection=collection)
            if not report.ok:
                raise ValueError(f"the corpus could not be ingested: {report.summary()}")
            await _check_labels(pool, data, collection)
            for q in data.queries:
                gated = await knowledge.search(pool, embeddings, q.query, collection=collection, k=ctx.rag_top_k, token_budget=ctx.rag_token_budget)
                ungated = await knowledge.search(
                    pool, embeddings, q.query, collection=collection, k=ctx.rag_top_k, token_budget=ctx.rag_token_budget, gate=None
                )
                results.append(
                    QueryResult(
                        query=q.query,
                        related=q.related,
                        split=q.split,
                        chunks=[_seen(c, q.relevant) for c in gated],
                        ungated_chunks=[_seen(c, q.relevant) for c in ungated],
                    )
                )
                if opts.calibrate and q.split == "calibration":
                    pool_chunks = await knowledge.fused_candidates(pool, embeddings, q.query, collection=collection, k=ctx.rag_top_k)
                    samples.append(
                        (q, [Candidate(c.vector_similarity, c.text_match, c.whole_match, is_relevant(c, q.relevant), c.text_coverage) for c in pool_chunks])
                    )
            chunk_count = sum(d.chunk_count for d in await knowledge.list_documents(pool, collection))
        finally:
            for doc in await knowledge.list_documents(pool, collection):
                await knowledge.remove(pool, doc.source, collection)

    fit = calibrate([(q.related, cands) for q, cands in samples]) if opts.calibrate else None
    gate = knowledge.RELEVANCE_GATE
    out = RetrievalResults(
        dataset=str(Path(opts.dataset or DEFAULT_SET)),
        corpus=data.corpus,
        chunks=chunk_count,
        embeddings=backend.embeddings.name,
        gate={
            "min_similarity": gate.min_similarity,
            "min_similarity_text_match": gate.min_similarity_text_match,
            "min_similarity_covered": gate.min_similarity_covered,
            "min_coverage": gate.min_coverage,
        },
        k=ctx.rag_top_k,
        token_budget=ctx.rag_token_budget,
        figures=[split_figures(results, s) for s in SPLITS],
        calibration=fit,
        queries=results,
        **clock.timing(),
    )
    out_dir = write_results_json(out, opts.out or default_out_dir("retrieval", run_id))
    _print(out, console, out_dir)
    return out


async def _check_labels(pool, data: RetrievalSet, collection: str) -> None:
    """Every label must name a section the corpus has: a renamed heading is a broken label, not a miss."""
    sections = await knowledge.list_sections(pool, collection)
    broken = sorted(
        {
            f"{label.source} › {label.heading!r}"
            for q in data.queries
            for label in q.relevant
            if not any(_same_file(src, label.source) and label.heading.casefold() in h.casefold() for src, h in sections)
        }
    )
    if broken:
        raise ValueError("labels that match no chunk of the corpus (renamed heading or file?): " + "; ".join(broken))


def _rate(n: int, total: int) -> str:
    return f"{n}/{total} = {n / total:.0%}" if total else "–"


def _print(results: RetrievalResults, console: Console, out_dir: Path) -> None:
    table = Table(title=f"Knowledge given to {len(results.queries)} messages ({results.chunks} chunks, k={results.k}, {results.embeddings})")
    for col in ("split", "unrelated with any chunk", "(no gate)", "related: labelled chunk in top k", "(no gate)"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for f in results.figures:
        table.add_row(
            f.split.replace("_", "-"),
            _rate(f.unrelated_with_chunks, f.unrelated),
            _rate(f.unrelated_with_chunks_ungated, f.unrelated),
            _rate(f.related_hits, f.related),
            _rate(f.related_hits_ungated, f.related),
            style="bold" if f.split == "all" else None,
        )
    console.print(table)
    everything = results.figures[-1]

    def verdict(ok: list[bool]) -> str:
        # Per split: "all" alone would let a fitted calibration half hide a held-out miss.
        return ", ".join(f"{f.split.replace('_', '-')} {'met' if good else 'MISSED'}" for f, good in zip(results.figures, ok))

    console.print(
        f"Targets: unrelated with any chunk ≤ {TARGET_UNRELATED:.0%} "
        f"({verdict([f.unrelated_rate <= TARGET_UNRELATED for f in results.figures])}), related hit at k ≥ {TARGET_RELATED:.0%} "
        f"({verdict([f.related_hit_rate >= TARGET_RELATED for f in results.figures])}). Gate {results.gate}; "
        f"knowledge tokens given to unrelated messages: {everything.unrelated_tokens:,} (no gate: {everything.unrelated_tokens_ungated:,})."
    )
    for q in results.queries:
        if not q.ok:
            what = "got " + ", ".join(f"{c.citation} ({c.similarity})" for c in q.chunks) if not q.related else "labelled chunk not given"
            console.print(f"  miss ({q.split}) {q.query!r}: {what}", markup=False)
    if results.calibration:
        fit = results.calibration
        console.print(
            f"Calibrated on the calibration split: min_similarity={fit.min_similarity:.2f}, "
            f"min_similarity_text_match={fit.min_similarity_text_match:.2f}, "
            f"min_similarity_covered={fit.min_similarity_covered:.2f} (related admitted {fit.related_admitted:.0%}, "
            f"unrelated admitted {fit.unrelated_admitted:.0%}, {fit.tied} tied grid points); "
            "put them in knowledge.hybrid_ranking.RelevanceGate to use them."
        )
    console.print(f"Results: {out_dir / 'results.json'}")
