"""Variants run as langsmith.aevaluate experiments; without a key nothing leaves the machine."""

from __future__ import annotations

import socket

import pytest

from evals.experiment import ExampleSpec, dataset_name, run_experiments


@pytest.fixture
def no_network(monkeypatch):
    """Any DNS lookup or connection attempt fails the test."""
    attempts: list[str] = []

    def refuse(*args, **kwargs):
        attempts.append(str(args[:2]))
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    monkeypatch.delenv("LANGCHAIN_API_KEY", raising=False)
    yield attempts
    assert attempts == []


EXAMPLES = [
    ExampleSpec(key="c1", inputs={"key": "c1", "text": "hello"}, outputs={"expected": "HELLO"}),
    ExampleSpec(key="c2", inputs={"key": "c2", "text": "bye"}, outputs={"expected": "bye"}),
]


def broken(outputs: dict | None, reference_outputs: dict | None) -> dict:
    raise RuntimeError("evaluator bug")


def exact(outputs: dict | None, reference_outputs: dict | None) -> list[dict]:
    if not outputs:
        return []
    return [{"key": "exact", "score": float(outputs["text"] == reference_outputs["expected"])}]


async def test_each_variant_is_scored_by_the_same_plain_evaluators_offline(no_network):
    def make_target(variant: str):
        async def target(inputs: dict) -> dict:
            if inputs["key"] == "c2" and variant == "upper":
                raise RuntimeError("this conversation failed")
            return {"text": inputs["text"].upper() if variant == "upper" else inputs["text"]}

        return target

    runs, uploaded_to = await run_experiments(
        kind="test",
        dataset_label="unit",
        variants=["upper", "same"],
        examples=EXAMPLES,
        make_target=make_target,
        evaluators=[exact, broken],
        experiment_prefix="unit",
        metadata={},
    )
    assert uploaded_to is None
    assert [r.variant for r in runs] == ["upper", "same"]
    upper, same = runs
    assert [r.key for r in upper.rows] == ["c1", "c2"]
    assert upper.rows[0].scores == {"exact": 1.0}
    assert upper.rows[1].error and upper.rows[1].scores == {}
    assert upper.rows[1].evaluator_errors == []  # a failed conversation is reported once, by its error
    assert [r.scores["exact"] for r in same.rows] == [0.0, 1.0]
    assert same.rows[0].evaluator_errors and "evaluator bug" in same.rows[0].evaluator_errors[0]
    assert upper.experiment_name == "unit-upper (local, not uploaded)"


def test_the_dataset_name_changes_with_its_content_so_an_upload_is_reused_only_for_the_same_data():
    again = dataset_name("summaries", "locomo7", list(EXAMPLES))
    assert again == dataset_name("summaries", "locomo7", list(EXAMPLES))
    changed = [EXAMPLES[0], ExampleSpec(key="c2", inputs={"key": "c2", "text": "bye!"}, outputs={"expected": "bye"})]
    assert dataset_name("summaries", "locomo7", changed) != again
    assert again.startswith("memory-agent-summaries-locomo7-")


def not_applicable(outputs: dict | None, reference_outputs: dict | None) -> list[dict]:
    return []  # as retention without probes (DialogSum) and fold_stability with one fold answer


async def test_an_evaluator_with_nothing_to_score_is_not_an_evaluator_error(no_network):
    """DialogSum has no probes and short chats fold once: retention and fold_stability return []."""

    def make_target(variant: str):
        async def target(inputs: dict) -> dict:
            return {"text": inputs["text"]}

        return target

    async def async_not_applicable(outputs: dict | None, reference_outputs: dict | None) -> list[dict]:
        return []  # as the LLM judge without reader answers

    (run,), _ = await run_experiments(
        kind="test",
        dataset_label="unit",
        variants=["same"],
        examples=EXAMPLES,
        make_target=make_target,
        evaluators=[not_applicable, async_not_applicable, exact],
        experiment_prefix="unit",
        metadata={},
    )
    assert [r.evaluator_errors for r in run.rows] == [[], []]
    assert [r.scores for r in run.rows] == [{"exact": 0.0}, {"exact": 1.0}]


async def test_a_variant_given_twice_is_refused_before_anything_runs(no_network):
    """Run twice, the second run read what the first had stored (same user and threads): other numbers, one verdict."""
    made: list[str] = []

    def make_target(variant: str):
        made.append(variant)

        async def target(inputs: dict) -> dict:
            return {"text": inputs["text"]}

        return target

    with pytest.raises(ValueError, match="offline given more than once"):
        await run_experiments(
            kind="test",
            dataset_label="unit",
            variants=["offline", "structured", "offline"],
            examples=EXAMPLES,
            make_target=make_target,
            evaluators=[exact],
            experiment_prefix="unit",
            metadata={},
        )
    assert made == []
