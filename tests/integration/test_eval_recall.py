"""`memory-agent eval recall` end to end on a tiny LoCoMo-format file written here (real Postgres, offline model)."""

from __future__ import annotations

import pytest

import io
import json

from rich.console import Console

from evals.cli import main
from evals.recall_eval import RecallOptions, run_recall
from tests.support.locomo_sample import locomo_sample
from tests.support.openai_stub_server import openai_stub, openai_stub_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow  # a whole eval replay


def test_eval_recall_imports_asks_categories_1_to_4_and_writes_every_system_with_its_files(tmp_path, new_database):
    dataset = tmp_path / "tiny_locomo.json"
    dataset.write_text(json.dumps([locomo_sample("tiny-a"), locomo_sample("tiny-b")]), encoding="utf-8")
    out = tmp_path / "out"

    code = main(["recall", "--dataset", str(dataset), "--limit", "1", "--out", str(out), "--database-url", new_database("evalrecall"), "--no-progress"])

    assert code == 0
    for f in ("results.json", "report.md", "recall_vs_tokens.png"):
        assert (out / f).stat().st_size > 0, f
    results = json.loads((out / "results.json").read_text())
    assert results["conversations"] == ["tiny-a"]
    systems = results["systems"]
    assert set(systems) == {"memory-agent", "whole_history", "recent", "bm25_turns", "bm25_excerpts"}
    for name, s in systems.items():
        assert s["questions"] == 4, name  # the adversarial (category 5) question is not asked
        assert 0 <= s["answer_recall"] <= 1 and 0 <= s["evidence_recall"] <= 1
        assert s["prompt_tokens_median"] > 0 and set(s["per_category"]) == {"1 multi-hop", "2 temporal", "4 single-hop"}
    # The whole history holds every evidence turn; the baselines get at most the memory-agent's median.
    assert systems["whole_history"]["evidence_recall"] == 1.0
    assert results["baseline_token_budget"] == int(systems["memory-agent"]["prompt_tokens_median"])
    assert systems["bm25_turns"]["prompt_tokens_median"] <= results["baseline_token_budget"]
    assert results["load_context_ms"]["p95"] >= results["load_context_ms"]["p50"] > 0
    assert results["import_stats"]["messages"] == 8
    assert results["unrelated"]["asked"] > 0 and 0 <= results["unrelated"]["rate"] <= 1  # the gate's check runs with it
    assert set(systems["memory-agent"]["prompt_sections_median"]) >= {"system", "summary", "episodes", "recent"}
    assert "| memory-agent |" in (out / "report.md").read_text()
    rows = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]  # each question, to read a miss
    assert [r["question"] for r in rows] == [q["question"] for q in locomo_sample()["qa"] if q["category"] != 5]
    assert all(set(r["systems"]) == set(systems) for r in rows)
    assert all("## From earlier conversations" in r["found"] and "## The user's message" in r["found"] for r in rows)
    assert all(r["question"] not in r["found"] for r in rows)  # what memory found, without the question


async def test_the_reader_check_answers_a_fixed_held_out_sample_from_memory_and_bm25_prompts_over_the_openai_client(tmp_path, new_database, openai_stub):
    """--reader-model: the same questions for both systems, from the held-out part only, one system at a
    time (a local server's cache keeps the shared prefix), each prompt as built plus the short-answer line;
    F1 scored against the gold answer, and memory-agent's paired lead in F1 and in prompt words reported."""
    from evals.recall_reader import READER_INSTRUCTION

    gold = {q["question"]: q.get("answer") for q in locomo_sample()["qa"]}

    def reader(request):  # answers with the gold answer when its first word reached the prompt
        last = request.messages[-1]["content"]
        question = next(q for q in gold if q in last)
        context = "\n".join(str(m["content"]) for m in request.messages[:-1]) + last.split(question)[0]
        answer = str(gold[question])
        return answer if answer.split()[0].rstrip(",") in context else "No information available"

    openai_stub.reset(reader)
    dataset = tmp_path / "tiny_locomo.json"
    dataset.write_text(json.dumps([locomo_sample("tiny-a"), locomo_sample("tiny-b")]), encoding="utf-8")
    out = tmp_path / "out"

    # In the test's own event loop (not the CLI's asyncio.run): langchain-openai caches its HTTP client
    # per base URL, and one made in a loop that then closes fails every later test on this stub.
    log = io.StringIO()  # not a terminal: progress is a line per finished unit
    await run_recall(RecallOptions(dataset=str(dataset), split=["tiny-a"], reader_model="openai:stub-reader", reader_questions=3,
                                   out=out, database_url=new_database("evalreader")), Console(file=log, width=200))

    results = json.loads((out / "results.json").read_text())
    check = results["reader"]
    assert check["conversations"] == ["tiny-b"] and check["questions"] == 3  # held out only, the sample's size
    assert set(check["systems"]) == {"memory-agent", "bm25_turns"}
    asked = [r.messages[-1]["content"] for r in openai_stub.requests]
    assert len(asked) == 6 and all(a.endswith(READER_INSTRUCTION) for a in asked)
    questions = [next(q for q in gold if q in a) for a in asked]
    assert questions[:3] == questions[3:]  # the same sample for each system, one system after the other
    assert all("The user's message" in a for a in asked[:3]) and not any("The user's message" in a for a in asked[3:])
    for name, s in check["systems"].items():
        assert 0 < s["f1"] <= 1 and 0 <= s["answer_recall"] <= 1, name
    assert set(check["lead_f1"]) == {"bm25_turns"} and set(check["lead_answer_words"]) == {"bm25_turns"}
    assert results["systems"]["whole_history"]["f1"] is None  # not read: only the chosen systems are
    # A log says when each system's answers are done (a real reader takes an hour or more a system).
    assert "answers · memory-agent: 3 answers in" in log.getvalue() and "answers · bm25_turns: 3 answers in" in log.getvalue()
    report = (out / "report.md").read_text()
    assert "## Reader check" in report and "The first answers:" in report
    rows = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    read = [r for r in rows if "reader_answer" in r["systems"]["memory-agent"]]
    assert len(read) == 3 and all(r["conversation"] == "tiny-b" and "reader_answer" in r["systems"]["bm25_turns"] for r in read)


def test_eval_recall_refuses_an_unknown_reader_system_before_importing_anything(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["recall", "--dataset", str(tmp_path / "none.json"), "--reader-model", "offline", "--reader-systems", "memory-agent,bm25"])

    assert exit.value.code == 2
    assert "--reader-systems: no system bm25" in capsys.readouterr().err


@pytest.mark.parametrize("split", [["tiny-a", "tiny-b"], ["1"]], ids=["all of them", "one not run"])
def test_eval_recall_refuses_a_split_that_leaves_a_side_without_questions(tmp_path, capsys, split):
    """Such a side was reported as answer words 0.000, as if measured."""
    dataset = tmp_path / "two.json"
    dataset.write_text(json.dumps([locomo_sample("tiny-a"), locomo_sample("tiny-b")]))
    conversations = ["--conversations", "0"] if split == ["1"] else []
    with pytest.raises(SystemExit) as exit:
        main(["recall", "--dataset", str(dataset), *conversations, "--split", ",".join(split), "--out", str(tmp_path / "out")])

    assert exit.value.code == 2
    assert "--split leaves no" in capsys.readouterr().err
    assert not (tmp_path / "out" / "questions.jsonl").exists()


def _long_sample() -> dict:
    """The tiny conversation and six more sessions after it, June to July: its first sessions fold out of the
    recent conversation, so the questions about them are answered by excerpts."""
    sample = locomo_sample("tiny-long")
    topics = ["a sourdough loaf with rye flour", "a hike up Mount Tamalpais", "a jazz concert downtown",
              "a chess tournament at the library", "a kayak trip on the bay", "a pottery class on Thursdays"]
    for n, topic in enumerate(topics, start=3):
        sample["conversation"][f"session_{n}_date_time"] = f"6:00 pm on {n * 4} June, 2023" if n * 4 <= 30 else f"6:00 pm on {n * 4 - 30} July, 2023"
        sample["conversation"][f"session_{n}"] = [
            {"speaker": "Caroline", "dia_id": f"D{n}:1", "text": f"This week I tried {topic}, and I want to tell you all about it."},
            {"speaker": "Melanie", "dia_id": f"D{n}:2", "text": f"Tell me everything about {topic}! How did it go?"},
            {"speaker": "Caroline", "dia_id": f"D{n}:3", "text": f"It went well: {topic} took most of Saturday and I would do it again."},
            {"speaker": "Melanie", "dia_id": f"D{n}:4", "text": f"I am glad {topic} went well. Let us talk again next week."},
        ]
    return sample


def test_eval_recall_asks_at_the_prompt_budget_given_and_the_excerpts_take_what_is_left_of_it(tmp_path, new_database):
    dataset = tmp_path / "long_locomo.json"
    dataset.write_text(json.dumps([_long_sample()]), encoding="utf-8")
    runs = {}
    for budget in (None, 900):
        out = tmp_path / f"out-{budget}"
        extra = ["--prompt-budget", str(budget)] if budget else []
        assert main(["recall", "--dataset", str(dataset), "--out", str(out), "--database-url", new_database(f"evalbudget{budget}"), "--no-progress", *extra]) == 0
        runs[budget] = json.loads((out / "results.json").read_text())

    default, small = runs[None], runs[900]
    assert default["prompt_token_budget"] == 2000 and small["prompt_token_budget"] == 900
    ours, theirs = small["systems"]["memory-agent"], default["systems"]["memory-agent"]
    assert theirs["prompt_tokens_median"] > 900 and theirs["prompt_sections_median"]["episodes"] > 0
    assert 0 < ours["prompt_sections_median"]["episodes"] < theirs["prompt_sections_median"]["episodes"]
    assert ours["prompt_tokens_median"] <= 900  # the excerpts take only what the other sections leave of it
    assert small["baseline_token_budget"] == int(ours["prompt_tokens_median"])  # the baselines follow memory-agent's median
    assert small["systems"]["bm25_excerpts"]["prompt_tokens_median"] <= 900  # its plain-search twin is asked at the same budget
    assert (default["excerpt_token_budget"], small["excerpt_token_budget"]) == (2000, 2000)
