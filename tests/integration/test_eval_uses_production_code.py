"""The evals run the production node functions: patch production code and the eval's results change."""

from __future__ import annotations

import uuid

import pytest

import nodes.extract_memories
import nodes.summarize
from evals.datasets import load_builtin
from evals.extraction_target import ExtractionRunSettings, make_extraction_target
from evals.eval_database import EvalWorkspace
from evals.production_nodes import production_node
from evals.summary_records import SummaryOutput
from evals.summary_target import SummaryRunSettings, make_summary_target
from core.context import Context
from llm.structured import StructuredResult
from core.schemas import ExtractionResult, NewFact

SENTINEL = "Sentinel fact injected by a patched production function"


@pytest.fixture(scope="module")
def conversation():
    return load_builtin(limit=1)[0]


def inputs_of(conversation) -> dict:
    return {"key": conversation.id, "conversation": conversation.model_dump(mode="json"), "questions": []}


def test_the_eval_graphs_run_the_production_graphs_node_functions():
    assert production_node("summarize") is nodes.summarize.summarize
    assert production_node("extract_memories") is nodes.extract_memories.extract_memories


@pytest.mark.slow  # replays a whole conversation through the eval graph
async def test_patching_the_production_fold_changes_the_evals_summaries(backend, monkeypatch, conversation):
    real_fold = nodes.summarize.fold_summary
    calls: list[int] = []

    async def patched_fold(model, previous, folded, variant, config=None):
        calls.append(len(folded))
        result = await real_fold(model, previous, folded, variant, config=config)
        if SENTINEL not in result.value.key_facts:
            result.value.key_facts.append(SENTINEL)
        return result

    monkeypatch.setattr(nodes.summarize, "fold_summary", patched_fold)
    run_id = uuid.uuid4().hex[:8]
    settings = SummaryRunSettings(
        model="offline", context=Context(user_id=f"eval-{run_id}", summary_window=8, tail_size=4), run_id=run_id
    )
    target = make_summary_target(settings, backend.store, "structured")
    out = SummaryOutput.model_validate(await target(inputs_of(conversation)))

    assert calls, "the eval never called the production fold"
    assert len(out.folds) == len(calls)  # every fold of the eval went through the patched function
    assert SENTINEL in out.summary
    assert all(f.calls >= 1 for f in out.folds)


@pytest.mark.slow  # replays a whole conversation through the eval graph
async def test_patching_the_production_extractor_changes_the_evals_memories(backend, monkeypatch, conversation):
    async def patched_extract(model, user_message, reply, stored, config=None, **options):
        return StructuredResult(value=ExtractionResult(new_facts=[NewFact(text=SENTINEL)]), attempts=1, method="patched")

    monkeypatch.setattr(nodes.extract_memories, "extract", patched_extract)
    workspace = EvalWorkspace(backend, uuid.uuid4().hex[:8])
    target = make_extraction_target(ExtractionRunSettings(run_id=workspace.run_id, max_turns=6), workspace, "offline")
    try:
        out = await target({**inputs_of(conversation), "speakers": ["user"]})
    finally:
        await workspace.clean_up()
    memories = out["speakers"][0]["memories"]
    assert memories == [SENTINEL]  # stored once: the production writer dropped the exact repeats
    assert out["speakers"][0]["writer"].get("duplicates_dropped", 0) >= 1
