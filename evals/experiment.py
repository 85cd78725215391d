"""Run each variant as a LangSmith experiment: uploaded when a key is set, local otherwise.

One code path: ``langsmith.aevaluate(target, data=..., evaluators=...,
experiment_prefix=...)`` runs every variant, and the same plain evaluator
functions score the runs either way.

* ``LANGSMITH_API_KEY`` set: the examples are uploaded once to a dataset whose
  name carries a hash of their content (a re-run with the same data reuses it),
  and each variant becomes one experiment named ``<prefix>-<variant>-<suffix>``
  on that dataset, with the variant and settings in its metadata. Compare them
  in LangSmith's dataset view.
* no key: the examples are passed as a list of ``langsmith.schemas.Example``
  and ``upload_results=False`` (supported by langsmith ≥ 0.2; checked against
  0.14's ``_arunner``). The client given to ``aevaluate`` then points nowhere
  and samples no traces, so nothing leaves the machine.

LangSmith prints a line and a tqdm bar per experiment; they are captured (the
terminal shows our own progress) and the experiment URL, when there is one, is
kept in the results.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import io
import json
import logging
import os
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langsmith import Client, aevaluate
from langsmith.schemas import Example
from pydantic import BaseModel

log = logging.getLogger(__name__)

__all__ = ["ExampleSpec", "ExperimentRow", "ExperimentRun", "Score", "langsmith_enabled", "record_evaluator", "run_experiments"]

_NAMESPACE = uuid.UUID("6f1e5d0a-4b7c-4a53-9a11-6d2f1c9e0b21")
_URL = re.compile(r"https?://\S+")


@dataclass(frozen=True)
class ExampleSpec:
    """One dataset example: ``key`` identifies the conversation in the results."""

    key: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclass
class ExperimentRow:
    key: str
    outputs: dict[str, Any] | None
    scores: dict[str, float]
    error: str | None = None  # the target failed
    evaluator_errors: list[str] = field(default_factory=list)  # "key: error" of evaluators that raised


@dataclass
class ExperimentRun:
    variant: str
    experiment_name: str
    rows: list[ExperimentRow] = field(default_factory=list)
    url: str | None = None


Score = dict[str, object]  # {"key": ..., "score": ...}, what an evaluator returns a list of


def record_evaluator(output_model: type[BaseModel], reference_model: type[BaseModel]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Makes ``fn(output, reference) -> list[Score]`` (sync or async), which reads the two records, a LangSmith
    evaluator ``(outputs, reference_outputs)`` over their dicts. A failed target (no outputs) scores nothing."""

    def records(outputs: dict | None, reference_outputs: dict | None) -> tuple[Any, Any] | None:
        if not outputs or not reference_outputs:
            return None
        return output_model.model_validate(outputs), reference_model.model_validate(reference_outputs)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            async def evaluator(outputs: dict | None, reference_outputs: dict | None) -> list[Score]:
                parsed = records(outputs, reference_outputs)
                return [] if parsed is None else await fn(*parsed)

        else:

            def evaluator(outputs: dict | None, reference_outputs: dict | None) -> list[Score]:
                parsed = records(outputs, reference_outputs)
                return [] if parsed is None else fn(*parsed)

        # Not functools.wraps: LangSmith picks what to pass by the parameter names it finds in the signature.
        evaluator.__name__, evaluator.__qualname__, evaluator.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        return evaluator

    return wrap


def langsmith_enabled() -> bool:
    return bool(os.environ.get("LANGSMITH_API_KEY") or os.environ.get("LANGCHAIN_API_KEY"))


def _offline_client() -> Client:
    # Never contacted: no info probe (info given), no trace ever sampled, no background batching.
    return Client(
        api_url="http://127.0.0.1:9",
        api_key="offline-eval-no-upload",
        info={},
        tracing_sampling_rate=0.0,
        auto_batch_tracing=False,
    )


def dataset_name(kind: str, label: str, examples: Sequence[ExampleSpec]) -> str:
    digest = hashlib.sha256(
        json.dumps([[e.key, e.inputs, e.outputs] for e in examples], sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:60] or "data"
    return f"memory-agent-{kind}-{safe}-{digest}"


def _upload_once(client: Client, name: str, examples: Sequence[ExampleSpec], description: str) -> None:
    if client.has_dataset(dataset_name=name):
        log.info("LangSmith dataset %s exists; reusing it", name)
        return
    dataset = client.create_dataset(name, description=description)
    client.create_examples(
        dataset_id=dataset.id,
        examples=[{"inputs": e.inputs, "outputs": e.outputs, "metadata": {"key": e.key}} for e in examples],
    )


def _local_examples(name: str, examples: Sequence[ExampleSpec]) -> list[Example]:
    dataset_id = uuid.uuid5(_NAMESPACE, name)
    return [
        Example(
            id=uuid.uuid5(_NAMESPACE, f"{name}/{e.key}"),
            dataset_id=dataset_id,
            inputs=e.inputs,
            outputs=e.outputs,
            metadata={"key": e.key},
        )
        for e in examples
    ]


def _key_of(example: Any) -> str:
    meta = getattr(example, "metadata", None) or {}
    return str(meta.get("key") or (example.inputs or {}).get("key") or example.id)


def _scores(evaluation_results: dict) -> tuple[dict[str, float], list[str]]:
    """Numeric scores by key, and the evaluators that raised (langsmith turns them into error results)."""
    out: dict[str, float] = {}
    errors: list[str] = []
    for r in evaluation_results.get("results", []):
        if (getattr(r, "extra", None) or {}).get("error"):
            errors.append(f"{r.key}: {r.comment}")
            continue
        score = getattr(r, "score", None)
        if isinstance(score, bool):
            score = float(score)
        if isinstance(score, int | float):
            out[r.key] = float(score)
    return out, errors


def _not_applicable_as_empty_results(evaluator: Callable[..., Any]) -> Callable[..., Any]:
    """The evaluator with "nothing to score" (``[]``) said the way langsmith accepts.

    Our evaluators return ``[]`` when a metric does not apply (no probes, a single fold);
    langsmith raises on an empty list ("Expected a non-empty dict"), which turned every
    DialogSum row into an evaluator error. ``{"results": []}`` is its empty result.
    """

    def adapt(result: Any) -> Any:
        return {"results": []} if isinstance(result, list) and not result else result

    if inspect.iscoroutinefunction(evaluator):

        @functools.wraps(evaluator)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return adapt(await evaluator(*args, **kwargs))

        return async_wrapper

    @functools.wraps(evaluator)  # keeps the signature langsmith maps its arguments by
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return adapt(evaluator(*args, **kwargs))

    return wrapper


async def run_experiments(
    *,
    kind: str,
    dataset_label: str,
    variants: Sequence[str],
    examples: Sequence[ExampleSpec],
    make_target: Callable[[str], Callable[[dict], Awaitable[dict]]],
    evaluators: Sequence[Callable[..., Any]],
    experiment_prefix: str,
    metadata: dict[str, Any],
    upload: bool | None = None,
) -> tuple[list[ExperimentRun], str | None]:
    """Run every variant over ``examples``; returns the runs and the LangSmith dataset name (None offline)."""
    # A variant's threads and users are named after it, and its results are keyed by its name: run twice,
    # the second run would start from what the first one stored, and the verdict would see one variant.
    if repeated := sorted({v for v in variants if list(variants).count(v) > 1}):
        raise ValueError(f"--variants: {', '.join(repeated)} given more than once (model names as resolved); give each variant once")
    upload = langsmith_enabled() if upload is None else upload
    name = dataset_name(kind, dataset_label, examples)
    if upload:
        client = Client()
        _upload_once(client, name, examples, f"memory-agent {kind} eval on {dataset_label}")
        data: Any = name
    else:
        client = _offline_client()
        data = _local_examples(name, examples)

    runs: list[ExperimentRun] = []
    for variant in variants:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "upload_results is in beta"
            results = await aevaluate(
                make_target(variant),
                data=data,
                evaluators=[_not_applicable_as_empty_results(e) for e in evaluators],
                experiment_prefix=f"{experiment_prefix}-{variant}",
                metadata={**metadata, "variant": variant, "eval": kind},
                max_concurrency=0,  # conversations one after another: one database, comparable timings
                client=client,
                upload_results=upload,
            )
            # Offline, langsmith names the local copy of the experiment at random; keep ours readable.
            name_of_run = results.experiment_name if upload else f"{experiment_prefix}-{variant} (local, not uploaded)"
            run = ExperimentRun(variant=variant, experiment_name=name_of_run)
            async for row in results:
                outputs = row["run"].outputs if row["run"] is not None else None
                error = getattr(row["run"], "error", None) if row["run"] is not None else "no run recorded"
                scores, evaluator_errors = _scores(row["evaluation_results"])
                if error:  # the evaluators had no output to read: the target's error says why, once
                    evaluator_errors = []
                run.rows.append(ExperimentRow(_key_of(row["example"]), outputs, scores, error, evaluator_errors))
        urls = _URL.findall(captured.getvalue())
        run.url = urls[0] if upload and urls else None
        order = {e.key: i for i, e in enumerate(examples)}
        run.rows.sort(key=lambda r: order.get(r.key, len(order)))
        runs.append(run)
    return runs, (name if upload else None)
