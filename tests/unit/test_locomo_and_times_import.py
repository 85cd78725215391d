"""An imported history is read as written or refused with the reason, never stored as something else
(a review's fuzzing of the HTTP API, stop 62: a 500, turns stored as "Ann: None", times in 1978)."""

from __future__ import annotations

import pytest

from memory.chat_import import ChatImport, InvalidImport, parse_import

SAID = "1:56 pm on 8 May, 2023"


def locomo(**sessions) -> dict:
    return {"conversation": {"speaker_a": "Ann", "speaker_b": "Bob", **sessions}}


def test_a_session_numbered_with_a_leading_zero_is_imported_under_its_own_key():
    """"session_01" made a KeyError (a 500): its number was looked up as "session_1"."""
    [chat] = parse_import(locomo(session_01=[{"speaker": "Ann", "text": "hi"}, {"speaker": "Bob", "text": "hello"}], session_01_date_time=SAID))
    assert [m.text for m in chat.messages] == ["Ann: hi", "Bob: hello"]
    assert chat.messages[0].time.isoformat() == "2023-05-08T13:56:00+00:00"


def test_two_keys_of_one_session_are_refused_not_one_of_them_dropped():
    with pytest.raises(InvalidImport, match="session_1 and session_01 are both session 1"):
        parse_import(locomo(session_1=[{"speaker": "Ann", "text": "hi"}], session_01=[{"speaker": "Ann", "text": "yo"}], session_1_date_time=SAID))


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        ({"speaker": "Ann", "text": None}, "session_1 turn 1: text must be a string, not NoneType"),
        ({"speaker": "Ann", "text": {"a": 1}}, "text must be a string, not dict"),
        ({"speaker": "Ann", "text": "hi", "blip_caption": 5}, "blip_caption must be a string, not int"),
        ({"speaker": "Ann", "text": ""}, "session_1 turn 1 says nothing"),
        ({"speaker": "Ann"}, "says nothing"),
    ],
    ids=["null_text", "object_text", "number_caption", "empty", "no_text"],
)
def test_a_turn_whose_text_is_not_words_is_refused_with_where_it_is(turn, reason):
    with pytest.raises(InvalidImport, match=reason):
        parse_import(locomo(session_1=[turn], session_1_date_time=SAID))


def test_a_turn_with_only_a_photo_is_imported_as_the_photo():
    [chat] = parse_import(locomo(session_1=[{"speaker": "Ann", "text": "", "blip_caption": "a dog on a beach"}], session_1_date_time=SAID))
    assert chat.messages[0].text == "Ann: [shared a dog on a beach]"


@pytest.mark.parametrize("speakers", [{"speaker_a": ["x"]}, {"speaker_a": 5}, {"speaker_b": True}, {"speaker_b": "  "}])
def test_speakers_that_are_not_names_are_refused(speakers):
    sample = locomo(session_1=[{"speaker": "Bob", "text": "hi"}], session_1_date_time=SAID)
    sample["conversation"].update(speakers)
    with pytest.raises(InvalidImport, match="each a name"):
        parse_import(sample)


@pytest.mark.parametrize("time", [253402300800, "253402300800", -62135596801, 1683553000.5, "1e10"])
def test_a_time_given_as_a_number_is_refused_not_read_as_seconds_or_milliseconds(time):
    """253402300800 (the end of 9999 in seconds) was stored as 1978-01-11: pydantic reads numbers
    past about 2e10 as milliseconds."""
    with pytest.raises(ValueError, match="ISO 8601 text"):
        ChatImport.model_validate({"messages": [{"role": "user", "text": "hi", "time": time}]})
    with pytest.raises(ValueError, match="ISO 8601 text"):
        ChatImport.model_validate({"created_at": time, "messages": [{"role": "user", "text": "hi", "time": "2023-05-08T13:56:00Z"}]})
    assert ChatImport.model_validate({"messages": [{"role": "user", "text": "hi", "time": "2023-05-08T13:56:00Z"}]}).messages[0].time.year == 2023
