"""Prometheus metrics of the agent: turns, node latency, tokens, memories written, memory-call failures by kind,
invalid stored items.

In a multi-process server set PROMETHEUS_MULTIPROC_DIR so workers share the figures.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from prometheus_client import Counter, Histogram

from core.errors import ModelOutputError

TURNS = Counter("memory_agent_turns_total", "Chat turns answered")
NODE_LATENCY = Histogram(
    "memory_agent_node_seconds",
    "Wall time of each graph node",
    ["node"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
TOKENS_IN = Counter("memory_agent_tokens_in_total", "Prompt tokens sent to models", ["purpose"])
TOKENS_OUT = Counter("memory_agent_tokens_out_total", "Completion tokens received from models", ["purpose"])
MEMORIES_WRITTEN = Counter("memory_agent_memories_written_total", "Memories written", ["kind"])
EXTRACTION_FAILURES = Counter(
    "memory_agent_extraction_failures_total", "Memory extractions that failed, by kind (see FAILURE_KINDS)", ["kind"]
)
SUMMARY_FAILURES = Counter(
    "memory_agent_summary_failures_total", "Summary folds, recompressions and titles that failed, by kind", ["kind"]
)

FAILURE_KINDS = ("invalid_output", "provider", "database", "internal")
"""invalid_output: the model's reply failed validation twice; provider: the model call raised
(HTTP error, timeout, refused connection); database: Postgres failed; internal: anything else (a bug)."""

for _kind in FAILURE_KINDS:  # every kind is reported from the start, at 0 (also across workers)
    EXTRACTION_FAILURES.labels(kind=_kind)
    SUMMARY_FAILURES.labels(kind=_kind)


def failure_kind(exc: BaseException, *, model_call: bool = False) -> str:
    """Which of FAILURE_KINDS ``exc`` is; ``model_call``: it was raised by a call to the chat model."""
    if isinstance(exc, ModelOutputError):
        return "invalid_output"
    if any(cls.__module__.split(".")[0] in ("psycopg", "psycopg_pool") for cls in type(exc).__mro__):
        return "database"
    return "provider" if model_call else "internal"


def count_failure(counter: Counter, exc: BaseException, *, model_call: bool = False) -> str:
    kind = failure_kind(exc, model_call=model_call)
    counter.labels(kind=kind).inc()
    return kind
# Each invalid item once per process (memory.user_memory), not on every read of it.
INVALID_ITEMS = Counter(
    "memory_agent_invalid_items_total", "Stored memory items skipped because they do not match their schema", ["kind"]
)


@contextmanager
def timed(node: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        NODE_LATENCY.labels(node=node).observe(time.perf_counter() - start)


def count_tokens_used(purpose: str, tokens_in: int, tokens_out: int) -> None:
    if tokens_in:
        TOKENS_IN.labels(purpose=purpose).inc(tokens_in)
    if tokens_out:
        TOKENS_OUT.labels(purpose=purpose).inc(tokens_out)
