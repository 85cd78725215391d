"""A new chat's provisional title: the first words of its first message, short enough for any list."""

from memory.chat_titles import provisional_title


def test_a_provisional_title_is_the_first_seven_words():
    assert provisional_title("My name is Dana and I live in Haifa") == "My name is Dana and I live…"
    assert provisional_title("Hello there!") == "Hello there"
    assert provisional_title("   ") == "New chat"


def test_a_provisional_title_is_at_most_80_characters_even_for_one_long_word():
    pasted = "https://example.com/" + "x" * 20000
    assert provisional_title(pasted) == pasted[:80] + "…"


def test_a_keyword_title_is_at_most_80_characters_even_for_one_long_word():
    """A keyword title (the offline model's, or when the model's title fails) of "Help with" and a
    17,000-character paste was the whole paste (a review's fuzzing, stop 62)."""
    from memory.chat_titles import keyword_title

    assert keyword_title("Help with " + "x" * 17000) == ("Help with " + "x" * 70) + "…"
    assert keyword_title("Hi! I'm Maya, and my bank charged me twice") == "My bank charged me twice"
