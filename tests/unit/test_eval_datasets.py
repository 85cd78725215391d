"""Eval dataset loaders: builtin data, LoCoMo/DialogSum/QMSum/MSC from ../shared/evaldata, registry."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from evals.datasets import (
    ADVERSARIAL_ANSWER,
    EVALDATA_ENV,
    Conversation,
    DatasetNotFoundError,
    builtin_path,
    detect_format,
    load_builtin,
    load_dataset,
    load_locomo,
)
from evals.metrics import lexical_recall

REPO_ROOT = Path(__file__).resolve().parents[2]
EVALDATA = REPO_ROOT.parent / "shared" / "evaldata"
needs_evaldata = pytest.mark.skipif(not EVALDATA.is_dir(), reason=f"shared eval data not found at {EVALDATA}")


@pytest.fixture(autouse=True)
def _default_evaldata_location(monkeypatch):
    monkeypatch.delenv(EVALDATA_ENV, raising=False)


# ---------------------------------------------------------------- builtin


@pytest.fixture(scope="module")
def builtin() -> list[Conversation]:
    return load_builtin()


def test_builtin_loads_four_valid_conversations_without_dangling_ids(builtin):
    assert len(builtin) == 4
    assert len({c.id for c in builtin}) == 4
    for conv in builtin:
        assert conv.source == "builtin"
        assert conv.check() == [], conv.id
        assert conv.speakers == ["user", "assistant"]


def test_builtin_conversations_have_the_promised_shape(builtin):
    for conv in builtin:
        assert 2 <= len(conv.sessions) <= 3
        assert all(10 <= len(s.turns) <= 20 for s in conv.sessions)
        assert all(s.date for s in conv.sessions)
        assert 5 <= len(conv.probes) <= 8
        cats = Counter(p.category for p in conv.probes)
        assert {1, 2, 3, 4} <= set(cats) and cats[5] == 1
        assert set(conv.session_summaries) == {s.index for s in conv.sessions}
        assert conv.reference_summaries
        assert len(conv.gold_facts) >= 10
        assert all(f.speaker == "user" and f.turn_id for f in conv.gold_facts)


def test_builtin_adversarial_probes_expect_a_refusal(builtin):
    for conv in builtin:
        (adv,) = conv.probes_by_category(5)
        assert adv.answer == ADVERSARIAL_ANSWER
        assert adv.adversarial_answer


def test_builtin_single_hop_answers_appear_in_their_evidence_turns(builtin):
    for conv in builtin:
        for probe in conv.probes_by_category(4):
            evidence_text = " ".join(t.text for t in conv.evidence_turns(probe))
            assert lexical_recall(probe.answer, evidence_text) >= 0.75, (conv.id, probe.question)


def test_builtin_gold_fact_turns_are_user_turns(builtin):
    for conv in builtin:
        for fact in conv.gold_facts:
            assert conv.turn(fact.turn_id).speaker == "user", fact.text


def test_load_dataset_by_name_and_limit_for_builtin():
    assert len(load_dataset("builtin")) == 4
    assert [c.id for c in load_dataset("builtin", limit=2)] == [c.id for c in load_builtin()[:2]]
    assert load_dataset("builtin", limit=0) == []


def test_conversations_in_our_schema_round_trip_through_a_json_file(tmp_path, builtin):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"conversations": [builtin[0].model_dump(mode="json")]}))
    assert detect_format(path) == "conversations"
    (loaded,) = load_dataset(str(path))
    assert loaded == builtin[0]


def test_builtin_path_detection_finds_our_schema():
    assert detect_format(builtin_path()) == "conversations"


# ---------------------------------------------------------------- LoCoMo


@pytest.fixture(scope="module")
def locomo() -> list[Conversation]:
    if not EVALDATA.is_dir():
        pytest.skip(f"shared eval data not found at {EVALDATA}")
    return load_locomo(EVALDATA / "locomo7.json")


@needs_evaldata
def test_locomo_loads_seven_conversations_with_expected_counts(locomo):
    assert [c.id for c in locomo] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47"]
    assert [len(c.sessions) for c in locomo] == [19, 19, 32, 29, 29, 28, 31]
    assert sum(c.n_turns for c in locomo) == 4124
    assert Counter(p.category for c in locomo for p in c.probes) == {4: 563, 5: 312, 2: 214, 1: 192, 3: 66}
    assert sum(len(c.gold_facts) for c in locomo) == 1755
    assert all(c.check() == [] for c in locomo)


@needs_evaldata
def test_locomo_sessions_ignore_date_keys_without_a_session(locomo):
    conv26 = locomo[0]
    # the file has session_1..25_date_time but only session_1..19
    assert [s.index for s in conv26.sessions] == list(range(1, 20))
    assert conv26.sessions[0].date == "1:56 pm on 8 May, 2023"
    assert set(conv26.session_summaries) == set(range(1, 20))
    assert conv26.speakers == ["Caroline", "Melanie"]


@needs_evaldata
def test_locomo_answers_are_strings_and_adversarial_probes_expect_refusal(locomo):
    probes = [p for c in locomo for p in c.probes]
    assert all(isinstance(p.answer, str) and p.answer for p in probes)
    adversarial = [p for p in probes if p.category == 5]
    assert all(p.adversarial_answer for p in adversarial)
    # two category-5 items carry an explicit gold answer ("No"); the rest get the refusal
    assert sum(p.answer == ADVERSARIAL_ANSWER for p in adversarial) == len(adversarial) - 2
    sunrise = next(p for p in locomo[0].probes if p.question == "When did Melanie paint a sunrise?")
    assert sunrise.answer == "2022"  # integer in the file


@needs_evaldata
def test_locomo_image_captions_are_appended_unless_disabled(locomo):
    turn = locomo[0].turn("D1:5")
    assert "[shared a photo of" in turn.text
    assert turn.metadata["blip_caption"] in turn.text
    plain = load_locomo(EVALDATA / "locomo7.json", limit=1, image_captions=False)[0].turn("D1:5")
    assert "[shared" not in plain.text


@needs_evaldata
def test_locomo_malformed_evidence_ids_are_repaired(locomo):
    repaired = [p for c in locomo for p in c.probes if "raw_evidence" in p.metadata]
    assert repaired
    assert all(e.startswith("D") and ":" in e and not e.startswith("D:") for p in repaired for e in p.evidence)


@needs_evaldata
def test_locomo_audit_corrections_are_applied_by_default(locomo):
    assert sum(c.metadata["audit_corrections_applied"] for c in locomo) == 110
    probe = next(p for p in locomo[0].probes if p.question_id == "locomo_0_qa2")
    assert probe.answer == "Counseling or mental health"
    assert probe.metadata["original_answer"] == "Psychology, counseling certification"
    assert probe.metadata["audit"]["error_type"] == "HALLUCINATION"


@needs_evaldata
def test_locomo_audit_can_be_disabled_or_limited_to_citation_fixes():
    raw = load_locomo(EVALDATA / "locomo7.json", limit=1, audit=False)[0]
    assert raw.metadata["audit_corrections_applied"] == 0
    assert next(p for p in raw.probes if p.question_id == "locomo_0_qa2").answer == (
        "Psychology, counseling certification"
    )
    cites = load_locomo(EVALDATA / "locomo7.json", limit=1, audit_error_types={"WRONG_CITATION"})[0]
    sunrise = next(p for p in cites.probes if p.question_id == "locomo_0_qa1")
    assert sunrise.evidence == ["D1:14"] and sunrise.metadata["original_evidence"] == ["D1:12"]
    assert next(p for p in cites.probes if p.question_id == "locomo_0_qa2").answer.startswith("Psychology")


@needs_evaldata
def test_a_wrong_citation_corrects_the_evidence_and_keeps_the_gold_answer_it_calls_right(locomo):
    """The audit's answer for a wrong citation is often its verdict in words, which no prompt holds."""
    [jobs] = [p for p in locomo[6].probes if p.question_id == "locomo_6_qa38"]
    assert jobs.answer == "quit his IT Job, secured his dream job, aspires to become an eSports competition organizer"
    assert jobs.evidence == ["D18:1", "D18:7"] and jobs.metadata["audit"]["error_type"] == "WRONG_CITATION"
    [beach] = [p for p in locomo[2].probes if p.question_id == "locomo_2_qa5"]
    assert (beach.answer, beach.evidence) == ("December 2022", ["D3:14"])
    corrected = [p for c in locomo for p in c.probes if p.metadata.get("audit")]
    assert sum(p.answer != p.metadata["original_answer"] for p in corrected) <= 99
    assert not any("citation" in p.answer.casefold() for p in corrected if p.metadata["audit"]["error_type"] == "WRONG_CITATION")


@needs_evaldata
def test_locomo_explicit_missing_audit_file_is_an_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="nope.json"):
        load_locomo(EVALDATA / "locomo7.json", limit=1, audit_path=tmp_path / "nope.json")


@needs_evaldata
def test_locomo_gold_facts_come_from_observations_with_turn_ids(locomo):
    fact = locomo[0].gold_facts[0]
    assert fact.speaker == "Caroline" and fact.session == 1 and fact.turn_id == "D1:3"
    # 9 facts cite several dia_ids (8 as a list, 1 as "D26:14, D26:34, D26:42")
    multi = [f for c in locomo for f in c.gold_facts if "turn_ids" in f.metadata]
    assert len(multi) == 9 and all(f.turn_id == f.metadata["turn_ids"][0] for f in multi)


# ---------------------------------------------------------------- DialogSum / QMSum / MSC


@needs_evaldata
def test_dialogsum_loads_500_dialogues_with_three_references_each():
    convs = load_dataset("dialogsum")
    assert len(convs) == 500
    assert convs[0].id == "test_0"
    assert all(len(c.sessions) == 1 and len(c.reference_summaries) == 3 for c in convs)
    assert all(t.speaker.startswith("#Person") for c in convs for t in c.all_turns())
    assert sum(c.n_turns for c in convs) == 4853
    assert convs[0].all_turns()[0].text.startswith("Ms. Dawson, I need you to take a dictation")


@needs_evaldata
def test_qmsum_loads_35_meetings_with_281_queries_and_summary_references():
    convs = load_dataset("qmsum")
    assert len(convs) == 35
    probes = [p for c in convs for p in c.probes]
    assert len(probes) == 281
    assert Counter(p.metadata["kind"] for p in probes) == {"specific": 244, "general": 37}
    assert all(p.category == 0 for p in probes)
    assert all(c.reference_summaries for c in convs)
    assert sum(c.n_turns for c in convs) == 20718
    assert all(c.check() == [] for c in convs)
    # spans are 0-based inclusive transcript indexes -> turn ids D1:<i+1>
    first = next(p for p in convs[0].probes if p.metadata["kind"] == "specific")
    assert first.metadata["relevant_text_span"] == [["1", "16"]]
    assert first.evidence[0] == "D1:2" and first.evidence[-1] == "D1:17" and len(first.evidence) == 16


@needs_evaldata
def test_msc_loads_501_dialogues_and_splits_persona_text_into_gold_facts():
    convs = load_dataset("msc")
    assert len(convs) == 501
    assert sum(len(c.gold_facts) for c in convs) == 6255
    first = convs[0]
    assert first.id == "test_0"
    assert set(first.speakers) == {"bot_0", "bot_1"}
    assert first.facts_for("bot_0")[0].text == "I own a Jeep."
    # turn 2 expresses four persona sentences at once
    assert len([f for f in first.gold_facts if f.turn_id == "D1:2"]) == 4
    assert first.metadata["init_personas"]["bot_0"][0] == "I am a vegan."


# ---------------------------------------------------------------- registry


@needs_evaldata
@pytest.mark.parametrize("name", ["locomo", "dialogsum", "qmsum", "msc"])
def test_limit_keeps_the_first_conversations(name):
    assert len(load_dataset(name, limit=2)) == 2
    assert load_dataset(name, limit=0) == []


@needs_evaldata
@pytest.mark.parametrize(
    ("relative", "source"),
    [
        ("locomo7.json", "locomo"),
        ("dialogsum/dialogsum.test.jsonl", "dialogsum"),
        ("qmsum/qmsum_all_test.jsonl", "qmsum"),
        ("msc/msc_personasummary_session_1_test.jsonl", "msc"),
    ],
)
def test_paths_are_detected_by_extension_and_content(relative, source):
    (conv,) = load_dataset(str(EVALDATA / relative), limit=1)
    assert conv.source == source


def test_missing_path_error_says_where_it_looked(tmp_path):
    missing = tmp_path / "nowhere" / "locomo.json"
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(missing))):
        load_dataset(str(missing))
    with pytest.raises(FileNotFoundError, match="nope"):
        load_locomo(tmp_path / "nope.json")


def test_missing_default_data_error_names_the_folder_and_the_override(tmp_path, monkeypatch):
    monkeypatch.setenv(EVALDATA_ENV, str(tmp_path))
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("locomo")
    message = str(info.value)
    assert str(tmp_path / "locomo7.json") in message and EVALDATA_ENV in message


def test_unknown_dataset_name_lists_the_known_names():
    with pytest.raises(ValueError, match="builtin"):
        load_dataset("no-such-dataset")


def test_unrecognised_file_content_is_rejected(tmp_path):
    path = tmp_path / "weird.jsonl"
    path.write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="unrecognised"):
        load_dataset(str(path))


# ---------------------------------------------------------------- cutting a conversation after N sessions


def _three_session_conversation() -> Conversation:
    from evals.datasets import GoldFact, Probe, Session, Turn

    sessions = [
        Session(index=i, date=f"day {i}", turns=[Turn(speaker="user", text=f"s{i} t{n}", turn_id=f"D{i}:{n}") for n in (1, 2)])
        for i in (1, 2, 3)
    ]
    return Conversation(
        id="c",
        source="test",
        sessions=sessions,
        probes=[
            Probe(question="in 1", answer="a", category=4, evidence=["D1:2"]),
            Probe(question="in 1 and 2", answer="a", category=1, evidence=["D1:1", "D2:2"]),
            Probe(question="in 1 and 3", answer="a", category=1, evidence=["D1:1", "D3:1"]),
            Probe(question="no evidence", answer="a", category=3),
        ],
        reference_summaries=["the whole conversation"],
        session_summaries={1: "one", 2: "two", 3: "three"},
        gold_facts=[
            GoldFact(text="by turn 2", turn_id="D2:1", session=2),
            GoldFact(text="by turn 3", turn_id="D3:2", session=3),
            GoldFact(text="by session 1", session=1),
            GoldFact(text="by session 3", session=3),
        ],
    )


def test_first_sessions_keeps_only_the_gold_data_the_kept_sessions_support():
    cut = _three_session_conversation().first_sessions(2)

    assert [s.index for s in cut.sessions] == [1, 2] and cut.n_turns == 4
    assert [p.question for p in cut.probes] == ["in 1", "in 1 and 2"]  # evidence in session 3 or none: dropped
    assert cut.reference_summaries == []  # they describe the sessions that were cut
    assert cut.session_summaries == {1: "one", 2: "two"}
    assert [f.text for f in cut.gold_facts] == ["by turn 2", "by session 1"]
    assert cut.metadata["sessions_kept"] == 2 and cut.metadata["sessions_total"] == 3
    assert cut.check() == []


def test_first_sessions_leaves_a_short_enough_conversation_whole_and_refuses_zero():
    conv = _three_session_conversation()
    assert conv.first_sessions(3) is conv
    with pytest.raises(ValueError):
        conv.first_sessions(0)


@needs_evaldata
def test_first_sessions_of_locomo_asks_only_what_the_first_sessions_answer(locomo):
    conv = locomo[0]
    cut = conv.first_sessions(2)
    kept = {t.turn_id for t in cut.all_turns()}
    assert cut.n_turns == len(conv.sessions[0].turns) + len(conv.sessions[1].turns)
    assert cut.probes and len(cut.probes) < len(conv.probes)
    assert all(p.evidence and set(p.evidence) <= kept for p in cut.probes)
    assert any(not set(p.evidence) <= kept for p in conv.probes)  # the whole conversation has probes the cut cannot answer
    assert set(cut.session_summaries) == {1, 2}
    assert cut.gold_facts and all(f.session in (1, 2) for f in cut.gold_facts)


def test_eval_summaries_cli_takes_max_sessions():
    from evals.cli import build_parser

    args = build_parser().parse_args(["summaries", "--max-sessions", "2"])
    assert args.max_sessions == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["summaries", "--max-sessions", "0"])


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.json", b"", "the file is empty"),
        ("blank.json", b"\n  \n", "the file is empty"),
        ("broken.json", b'{"conversations": [', "not valid JSON at line 1, column 20"),
        ("binary.json", b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
        ("binary.jsonl", b'{"dialog": []}\n\xff\xfe\x00\n', "not UTF-8 text"),
    ],
)
def test_a_dataset_file_that_is_not_json_is_refused_naming_the_file_and_why(tmp_path, name, content, reason):
    """It said only json's reason ("Expecting value: line 1 column 1 (char 0)"), or the codec's, not which file."""
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_dataset(str(path))
    assert str(path) in str(info.value) and reason in str(info.value)
