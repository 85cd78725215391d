"""What the user is told was remembered reads as plain words."""

from memory.writer.extraction import WriteReport


def test_preferences_are_described_in_plain_words():
    report = WriteReport(
        preference_changes={"prefers_bullets": True, "code_examples": False, "answer_length": "short",
                            "language": "Italian", "other_notes": ["Prefers tea over coffee"]},
        profile_changes={"name": "Dana"},
    )
    text = report.describe()
    assert "prefers bullet points" in text and "wants no code examples" in text and "prefers short answers" in text
    assert "prefers answers in Italian" in text and "Prefers tea over coffee" in text
    assert "=" not in text.replace("name = Dana", "") and "prefers_bullets" not in text and "other_notes" not in text
