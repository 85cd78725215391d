"""A new chat's provisional title: the first words of its first message, short enough for any list."""

from memory.chat_titles import provisional_title


def test_a_provisional_title_is_the_first_seven_words():
    assert provisional_title("My name is Dana and I live in Haifa") == "My name is Dana and I live…"
    assert provisional_title("Hello there!") == "Hello there"
    assert provisional_title("   ") == "New chat"


def test_a_provisional_title_is_at_most_80_characters_even_for_one_long_word():
    pasted = "https://example.com/" + "x" * 20000
    assert provisional_title(pasted) == pasted[:80] + "…"
