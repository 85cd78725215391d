"""CI smoke runs of `memory-agent eval summaries|extraction|tokens` on the builtin set, real Postgres, scripted model.

Kept fast: two conversations, a small compaction window (8 messages, tail 4).
"""

from __future__ import annotations

import csv
import json
import re

import pytest

import prompts
from evals.cli import main
from core.schemas import SummaryBoard
from tests.support.scripted_model import empty_extraction, registered_scripted_model

pytestmark = pytest.mark.slow  # each replays a whole eval dataset through the graph (tens of seconds)

FACT_PRESERVING_MARK = "LOSE NO CONCRETE DETAIL"  # a phrase only prompts/summary_variants/fact_preserving.md has


def _between(text: str, tag: str) -> str:
    return prompts.between(text, tag) or ""


def fold_board(messages) -> dict:
    """Fact-preserving keeps every user line as a key fact; any other variant keeps one vague sentence."""
    system = str(messages[0].content)
    body = next(str(m.content) for m in messages if m.type == "human" and f"<{prompts.NEW_MESSAGES_TAG}>" in str(m.content))
    previous = SummaryBoard.model_validate_json(_between(body, prompts.PREVIOUS_SUMMARY_TAG) or "{}")
    if FACT_PRESERVING_MARK not in system:
        return {"summary": "The user and the assistant talked about plans.", "topics": ["plans"]}
    new_lines = [line.removeprefix("[user] ") for line in _between(body, prompts.NEW_MESSAGES_TAG).splitlines() if line.startswith("[user] ")]
    return {"summary": "Everything the user said.", "key_facts": previous.key_facts + new_lines}


def judge(messages) -> dict:
    """A judge: CORRECT when the answer shares a word with the gold answer."""
    body = next(str(m.content) for m in messages if m.type == "human" and "Gold answer:" in str(m.content))
    gold = set(re.findall(r"\w+", body.split("Gold answer:", 1)[1].split("\n", 1)[0].lower()))
    answer = set(re.findall(r"\w+", body.split("Generated answer:", 1)[1].lower()))
    return {"reasoning": "word overlap", "label": "CORRECT" if gold & answer else "WRONG"}


def read_answer(messages) -> str:
    """A reader: the summary line sharing the most words with the question, or a refusal."""
    body = str(messages[-1].content)
    summary = _between(body, "summary")
    question = set(re.findall(r"\w+", body.split("Question:", 1)[1].lower()))
    pieces = [p for p in re.split(r"[;\n]", summary) if p.strip()]
    best = max(pieces, key=lambda p: len(question & set(re.findall(r"\w+", p.lower()))), default="")
    if not best or len(question & set(re.findall(r"\w+", best.lower()))) < 2:
        return "No information available"
    return best.strip()


def responder(kind, messages):
    if kind == "fold":
        return fold_board(messages)
    if kind == "title":
        return {"title": "Plans"}
    if kind == "extract":
        user = _between(str(messages[-1].content), prompts.USER_MESSAGE_TAG)
        first = re.split(r"(?<=[.!?])\s", user.strip())[0]
        return {**empty_extraction(), "new_facts": [{"text": first}] if len(first.split()) >= 4 else []}
    if any("Gold answer:" in str(m.content) for m in messages):
        return judge(messages)
    return read_answer(messages)


@pytest.fixture
def scripted():
    with registered_scripted_model(responder) as scripted:
        yield scripted


@pytest.fixture
def eval_db(new_database):
    return new_database("evalsmoke")


def test_eval_summaries_writes_every_file_and_names_the_variant_that_keeps_more(tmp_path, scripted, eval_db):
    name, model = scripted
    out = tmp_path / "summaries"
    code = main(
        ["summaries", "--dataset", "builtin", "--limit", "2", "--variants", "narrative,fact_preserving", "--model", name,
         "--judge-model", name, "--window", "8", "--tail", "4", "--out", str(out), "--database-url", eval_db, "--no-progress", "--no-upload"]
    )
    assert code == 0
    for f in ("results.json", "results.csv", "report.md", "retention_vs_tokens.png", "metric_retention.png", "metric_rouge1.png"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f

    results = json.loads((out / "results.json").read_text())
    variants = {v["variant"]: v for v in results["variants"]}
    assert set(variants) == {"narrative", "fact_preserving"}
    for v in variants.values():
        assert [c["key"] for c in v["conversations"]] == ["builtin-move-lisbon", "builtin-italian-bologna"]
        assert all(c["error"] is None and not c["evaluator_errors"] for c in v["conversations"])
        for key in ("retention", "retention_f1", "judge", "retention_lexical", "rouge1", "rougeL", "stability"):
            assert 0.0 <= v["metrics"][key]["mean"] <= 1.0, key
        assert v["metrics"]["folds"]["mean"] >= 3  # the small window really folded, incrementally
        assert v["metrics"]["summary_tokens"]["mean"] > 0 and v["metrics"]["compression_ratio"]["mean"] > 1

    # The two prompts really produced different summaries...
    samples = {n: v["conversations"][0]["details"]["sample"] for n, v in variants.items()}
    assert samples["narrative"] != samples["fact_preserving"]
    assert "Biscuit" in samples["fact_preserving"] and "Biscuit" not in samples["narrative"]
    # ...through the production fold prompt of each variant.
    systems = {str(m[0].content) for m in model.calls_of("fold")}
    assert prompts.summary_variant("narrative").text in systems and prompts.summary_variant("fact_preserving").text in systems

    # The better one is named, with its margin.
    winner = results["winners"]["retention"]
    assert winner["best"] == "fact_preserving" and winner["margin"] > 0
    report = (out / "report.md").read_text()
    assert "fact_preserving" in report.split("## Verdict", 1)[1].split("\n\n", 2)[1]
    assert "The built-in offline model" not in report and "OFFLINE RUN" not in report

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 2 * 2 + 2


def test_eval_summaries_offline_says_it_measures_the_extractive_fallback(tmp_path, eval_db):
    out = tmp_path / "offline"
    code = main(
        ["summaries", "--limit", "1", "--variants", "structured,narrative", "--model", "offline", "--window", "8", "--tail", "4",
         "--out", str(out), "--database-url", eval_db, "--no-progress", "--no-upload"]
    )
    assert code == 0
    report = (out / "report.md").read_text()
    assert "OFFLINE RUN" in report and "measures the fallback, not the prompt variants" in report
    assert "No difference on Retention" in report  # the extractive fallback ignores the prompt text


def test_eval_extraction_scores_facts_against_gold_with_the_stated_threshold(tmp_path, scripted, eval_db):
    name, _ = scripted
    out = tmp_path / "extraction"
    code = main(
        ["extraction", "--limit", "2", "--variants", f"{name},offline", "--threshold", "0.7", "--out", str(out),
         "--database-url", eval_db, "--no-progress", "--no-upload"]
    )
    assert code == 0
    for f in ("results.json", "results.csv", "report.md", "metric_fact_f1.png"):
        assert (out / f).is_file(), f
    results = json.loads((out / "results.json").read_text())
    scripted_run = next(v for v in results["variants"] if v["variant"] == name)
    m = scripted_run["metrics"]
    assert m["facts_extracted"]["mean"] > 5
    for key in ("fact_precision", "fact_recall", "fact_f1"):
        assert 0.0 <= m[key]["mean"] <= 1.0
    assert m["fact_recall"]["mean"] > 0  # first sentences of user messages do match some gold facts
    assert m["gold_facts"]["mean"] > 10
    report = (out / "report.md").read_text()
    assert "cosine ≥ 0.7" in report
    assert results["winners"]["fact_f1"]["verdict"] in report


def test_eval_tokens_reports_prompt_tokens_against_the_full_history(tmp_path, eval_db):
    out = tmp_path / "tokens"
    code = main(
        ["tokens", "--limit", "1", "--max-turns", "10", "--window", "6", "--tail", "2", "--out", str(out),
         "--database-url", eval_db, "--no-progress"]
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert len(results["turns"]) == 10
    assert all(t["sent"] > 0 and t["full"] > 0 for t in results["turns"])
    late = results["turns"][-1]
    assert late["summarized"] and late["sent"] < late["full"]
    assert 0 < results["saved"] < 1
    report = (out / "report.md").read_text()
    assert "prompt tokens saved" in report and "Mem0" in report
    assert (out / "results.csv").is_file() and list(out.glob("tokens_*.png"))


def test_eval_summaries_max_sessions_replays_only_the_first_sessions_and_says_so(tmp_path, eval_db):
    out = tmp_path / "cut"
    code = main(
        ["summaries", "--limit", "1", "--variants", "structured", "--model", "offline", "--max-sessions", "1",
         "--window", "8", "--tail", "4", "--out", str(out), "--database-url", eval_db, "--no-progress", "--no-upload"]
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["max_sessions"] == 1
    (conversation,) = results["variants"][0]["conversations"]
    from evals.datasets import load_builtin

    whole = load_builtin()[0]
    assert conversation["details"]["messages"] == len(whole.sessions[0].turns)  # session 1 only
    assert conversation["details"]["probes"] == sum(1 for p in whole.probes if p.evidence and all(e.startswith("D1:") for e in p.evidence))
    assert conversation["details"]["probes"] < len(whole.probes)
    assert "cut after its first 1 session(s)" in (out / "report.md").read_text()
