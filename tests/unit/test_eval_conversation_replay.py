"""How dataset conversations become the agent's user/assistant messages."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from evals.conversation_replay import human_speaker, replay_turns, subject_name, to_messages
from evals.datasets import Conversation, Session, Turn, load_builtin
from evals.token_savings import user_messages


def session(index: int, date: str, *turns: tuple[str, str]) -> Session:
    """A session of ``(speaker, text)`` turns, with LoCoMo's turn ids (D<session>:<turn>)."""
    return Session(
        index=index, date=date, turns=[Turn(speaker=who, text=text, turn_id=f"D{index}:{i}") for i, (who, text) in enumerate(turns, 1)]
    )


def two_speakers() -> Conversation:
    return Conversation(
        id="c1",
        source="locomo",
        sessions=[
            session(1, "1:56 pm on 8 May, 2023", ("Caroline", "I went to a support group."), ("Melanie", "That sounds great!")),
            session(2, "9:00 am on 25 May, 2023", ("Melanie", "I painted a sunrise."), ("Caroline", "Lovely.")),
        ],
    )


def test_speaker_a_becomes_the_user_and_speaker_b_the_assistant():
    messages = to_messages(two_speakers())
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, AIMessage, HumanMessage]


def test_named_speakers_keep_their_name_and_each_session_starts_with_its_date():
    texts = [m.content for m in to_messages(two_speakers())]
    assert texts[0] == "[session 1, 1:56 pm on 8 May, 2023] Caroline: I went to a support group."
    assert texts[1] == "Melanie: That sounds great!"
    assert texts[2] == "[session 2, 9:00 am on 25 May, 2023] Melanie: I painted a sunrise."


def test_message_ids_are_stable_so_the_compaction_cursor_survives_a_rerun():
    assert [m.id for m in to_messages(two_speakers())] == [m.id for m in to_messages(two_speakers())]
    assert to_messages(two_speakers())[0].id == "c1-D1:1"


def test_the_other_speaker_can_be_the_user_for_extraction():
    turns = replay_turns(two_speakers(), human="Melanie")
    assert [t.is_human for t in turns] == [False, True, True, False]
    assert human_speaker(two_speakers()) == "Caroline"


def test_builtin_user_and_assistant_keep_their_roles_without_a_name_prefix():
    conv = load_builtin(limit=1)[0]
    turns = replay_turns(conv)
    first_user = next(t for t in turns if t.is_human)
    assert first_user.speaker == "user"
    assert "user:" not in first_user.message.content
    assert all(t.is_human == (t.speaker == "user") for t in turns)
    assert subject_name(conv, "user") == "Priya"
    assert subject_name(two_speakers(), "Melanie") == "Melanie"


def test_token_replay_sends_only_the_first_speakers_turns_with_the_session_header():
    assert user_messages(two_speakers()) == [
        "[session 1, 1:56 pm on 8 May, 2023] I went to a support group.",
        "[session 2, 9:00 am on 25 May, 2023] Lovely.",
    ]


def test_first_person_gold_facts_are_matched_with_i_as_the_subject_not_the_speakers_id():
    # MSC: speaker ids bot_0/bot_1, persona sentences "I own a Jeep."; "bot_0 Owns a jeep" scored 0.63 against it.
    from evals.datasets.schema import GoldFact
    from evals.fact_matching import with_subject

    conv = two_speakers().model_copy(update={"gold_facts": [
        GoldFact(text="I own a Jeep.", speaker="Melanie", session=1), GoldFact(text="My father was a farmer.", speaker="Melanie", session=1),
        GoldFact(text="Caroline paints.", speaker="Caroline", session=1)]})  # fmt: skip
    assert subject_name(conv, "Melanie") == "I" and subject_name(conv, "Caroline") == "Caroline"
    assert with_subject("Owns a jeep", "I") == "I Owns a jeep" and with_subject("I have a jeep", "I") == "I have a jeep"
    assert with_subject("Likes music", "Caroline") == "Caroline Likes music"
