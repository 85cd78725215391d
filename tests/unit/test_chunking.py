"""Structure-aware chunking: sections by heading, paragraphs packed to a token target, overlap."""

from __future__ import annotations

import random
import re

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from core.tokens import count_tokens
from knowledge.chunking import (
    Span,
    chunk_text,
    hard_split,
    split_sections,
    split_sentences,
    split_to_fit,
)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def sentences(n: int, prefix: str = "Sentence") -> str:
    return " ".join(f"{prefix} number {i} talks about item {i}." for i in range(n))


# --------------------------------------------------------------------------- tokens


def test_count_tokens_is_characters_over_four_rounded_up():
    assert count_tokens("") == 0
    assert count_tokens("abcd") == 1
    assert count_tokens("abcde") == 2
    assert count_tokens("x" * 1400) == 350


def test_count_tokens_agrees_with_count_tokens_approximately_up_to_the_role_overhead():
    for text in ["hello world", "x" * 1401, "שלום עולם " * 30]:
        langchain = count_tokens_approximately([HumanMessage(text)], extra_tokens_per_message=0, count_name=False)
        assert 0 <= langchain - count_tokens(text) <= 2  # langchain also counts the role name


# --------------------------------------------------------------------------- sections


def test_headings_build_a_heading_path_that_resets_at_a_shallower_heading():
    text = "# Install\n\nintro\n\n## Linux\n\napt\n\n### Debian\n\ndeb\n\n## Windows\n\nexe\n\n# Usage\n\nrun"
    paths = [s.heading_path for s in split_sections(text)]
    assert paths == ["Install", "Install > Linux", "Install > Linux > Debian", "Install > Windows", "Usage"]


def test_text_before_the_first_heading_has_an_empty_heading_path():
    sections = split_sections("preface\n\n# Title\n\nbody")
    assert [(s.heading_path, s.paragraphs[0].text) for s in sections] == [("", "preface"), ("Title", "body")]


def test_closing_hashes_and_extra_spaces_are_not_part_of_the_heading():
    assert split_sections("##   Linux setup   ##\n\nbody")[0].heading_path == "Linux setup"


def test_hash_without_a_space_is_not_a_heading():
    sections = split_sections("#hashtag and #1 priority\n\nbody")
    assert sections[0].heading_path == ""
    assert sections[0].paragraphs[0].text.startswith("#hashtag")


def test_hash_lines_inside_a_code_fence_are_code_not_headings_and_the_fence_stays_one_paragraph():
    text = "# Setup\n\nRun this:\n\n```bash\n# comment, not a heading\n\necho hi\n```\n\nDone."
    sections = split_sections(text)
    assert [s.heading_path for s in sections] == ["Setup"]
    assert [p.text for p in sections[0].paragraphs] == [
        "Run this:",
        "```bash\n# comment, not a heading\n\necho hi\n```",
        "Done.",
    ]


def test_a_fence_inside_a_longer_fence_does_not_end_it_so_its_hash_lines_stay_code():
    text = "# Doc\n\n````markdown\n```bash\n# install deps\nmake\n```\n````\n\n~~~\n```\n# still code\n~~~~\n\n# After\n\ntext"
    sections = split_sections(text)
    assert [s.heading_path for s in sections] == ["Doc", "After"]
    code = [p.text for p in sections[0].paragraphs]
    assert code[0].startswith("````markdown") and code[0].endswith("make\n```\n````")
    assert code[1].startswith("~~~\n") and "# still code" in code[1] and len(code) == 2


def test_headings_without_body_produce_no_section():
    assert [s.heading_path for s in split_sections("# A\n## B\n\ntext")] == ["A > B"]


def test_paragraph_spans_point_back_into_the_source_text():
    text = "# T\n\n  first para\nline two\n\n\nsecond para  \n"
    for section in split_sections(text):
        for span in section.paragraphs:
            assert text[span.start : span.end] == span.text


# --------------------------------------------------------------------------- splitting big pieces


def test_sentences_split_after_terminal_punctuation_without_needing_a_capital_letter():
    span = Span("first one. second one! third? שלום עולם. fin", 10, 10 + 44)
    parts = split_sentences(span)
    assert [p.text for p in parts] == ["first one.", "second one!", "third?", "שלום עולם.", "fin"]
    assert parts[1].start == 10 + len("first one. ")


def test_hard_split_cuts_at_whitespace_and_respects_the_limit():
    text = " ".join(["word"] * 200)
    pieces = hard_split(Span(text, 0, len(text)), 10)
    assert all(count_tokens(p.text) <= 10 for p in pieces)
    assert all(not p.text.startswith(" ") and not p.text.endswith(" ") for p in pieces)
    assert " ".join(p.text for p in pieces) == text


def test_hard_split_cuts_a_word_longer_than_the_limit():
    text = "x" * 100
    pieces = hard_split(Span(text, 0, 100), 5)
    assert [len(p.text) for p in pieces] == [20] * 5


def test_split_to_fit_goes_sentences_then_lines_then_hard_cuts():
    long_sentence = " ".join(["word"] * 100)  # no punctuation, no newline: ~125 tokens
    text = "Short one. " + long_sentence
    pieces = split_to_fit(Span(text, 0, len(text)), 40)
    assert pieces[0].text == "Short one."
    assert all(count_tokens(p.text) <= 40 for p in pieces)
    assert words(" ".join(p.text for p in pieces)) == words(text)


# --------------------------------------------------------------------------- chunk_text


def test_blank_text_gives_no_chunks():
    assert chunk_text("") == []
    assert chunk_text("  \n\n \n") == []


def test_a_document_of_only_headings_still_gives_one_chunk():
    chunks = chunk_text("# Title\n## Subtitle")
    assert len(chunks) == 1
    assert "Title" in chunks[0].text and "Subtitle" in chunks[0].text


def test_plain_text_has_no_headings_so_its_hash_lines_are_kept_as_text():
    text = "Install notes\n# Run make install first\n# then restart the server\nDone.\n\n```\n# not a fence either\n\nx"
    chunks = chunk_text(text, markdown=False)
    assert [c.heading_path for c in chunks] == [""]
    for line in ("# Run make install first", "# then restart the server", "Done.", "# not a fence either"):
        assert line in chunks[0].text


def test_small_paragraphs_are_packed_together_into_one_chunk():
    text = "\n\n".join(f"Paragraph {i} is short." for i in range(5))
    chunks = chunk_text(text, target_tokens=350)
    assert len(chunks) == 1
    assert chunks[0].text == text


def test_chunks_never_cross_a_heading_and_carry_their_heading_path():
    text = "# A\n\nalpha text\n\n# B\n\nbeta text\n\n## C\n\ngamma text"
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("A", "alpha text"),
        ("B", "beta text"),
        ("B > C", "gamma text"),
    ]


def test_chunk_indexes_count_from_zero_across_the_whole_document():
    text = "# A\n\n" + sentences(60) + "\n\n# B\n\n" + sentences(60)
    chunks = chunk_text(text, target_tokens=100, overlap_tokens=10)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert len(chunks) > 4


def test_no_chunk_exceeds_the_target_tokens_on_random_documents():
    rng = random.Random(7)
    vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "XR-2291-B", "שלום", "città", "x" * 60]
    for trial in range(40):
        blocks = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.2:
                blocks.append("#" * rng.randint(1, 4) + " Heading " + str(rng.randint(0, 9)))
            else:
                n = rng.randint(1, 400)
                sentence_words = [rng.choice(vocabulary) + (". " if rng.random() < 0.1 else " ") for _ in range(n)]
                blocks.append("".join(sentence_words).strip())
        text = "\n\n".join(blocks)
        target = rng.choice([20, 50, 120, 350])
        overlap = rng.choice([0, 5, 50])
        chunks = chunk_text(text, target_tokens=target, overlap_tokens=overlap)
        assert all(c.tokens <= target for c in chunks), (trial, target)
        # nothing is lost: every word of the body text appears in some chunk
        body_words = set(words("\n".join(b for b in blocks if not b.startswith("#"))))
        assert body_words <= set(words(" ".join(c.text for c in chunks)))


def test_overlap_carries_the_previous_chunks_last_paragraph_into_the_next():
    paragraphs = [f"Paragraph {i} " + "filler " * 10 for i in range(12)]  # ~20 tokens each
    chunks = chunk_text("\n\n".join(p.strip() for p in paragraphs), target_tokens=100, overlap_tokens=25)
    assert len(chunks) > 2
    for prev, nxt in zip(chunks, chunks[1:]):
        last_paragraph = prev.text.split("\n\n")[-1]
        assert nxt.text.startswith(last_paragraph)
        assert count_tokens(last_paragraph) <= 25


def test_overlap_uses_last_sentences_when_the_last_paragraph_is_bigger_than_the_overlap():
    # paragraphs of 4 sentences (~40 tokens) with a 20-token overlap: a whole paragraph is too big to carry
    paragraphs = [" ".join(f"P{p} sentence {i} is here." for i in range(4)) for p in range(10)]
    chunks = chunk_text("\n\n".join(paragraphs), target_tokens=100, overlap_tokens=20)
    assert len(chunks) >= 3
    for prev, nxt in zip(chunks, chunks[1:]):
        last_paragraph = prev.text.split("\n\n")[-1]
        assert count_tokens(last_paragraph) > 20
        last_sentence = re.findall(r"[^.]+\.", last_paragraph)[-1].strip()
        carried = nxt.text.split("\n\n")[0]
        assert carried.endswith(last_sentence) and last_paragraph.endswith(carried)
        assert count_tokens(carried) <= 20


def test_overlap_within_a_split_paragraph_repeats_whole_trailing_sentences():
    paragraph = sentences(30)  # one ~250-token paragraph: split into sentences
    chunks = chunk_text(paragraph, target_tokens=100, overlap_tokens=20)
    assert len(chunks) >= 3
    for prev, nxt in zip(chunks, chunks[1:]):
        last_sentence = re.findall(r"[^.]+\.", prev.text)[-1].strip()
        assert last_sentence in nxt.text[: 20 * 4 + 1]
        first_new = nxt.text.index(last_sentence) + len(last_sentence)
        assert prev.text.endswith(nxt.text[:first_new])


def test_zero_overlap_repeats_nothing():
    paragraph = sentences(30)
    chunks = chunk_text(paragraph, target_tokens=100, overlap_tokens=0)
    assert " ".join(c.text for c in chunks) == paragraph


def test_overlap_is_not_carried_across_sections():
    text = "# A\n\n" + sentences(20) + "\n\n# B\n\nonly b"
    chunks = chunk_text(text, target_tokens=60, overlap_tokens=20)
    assert chunks[-1].heading_path == "B"
    assert chunks[-1].text == "only b"


def test_a_single_huge_paragraph_is_split_into_several_chunks_that_cover_it():
    paragraph = sentences(300)
    chunks = chunk_text(paragraph)
    assert len(chunks) >= 5
    assert all(c.tokens <= 350 for c in chunks)
    covered = set(words(" ".join(c.text for c in chunks)))
    assert set(words(paragraph)) <= covered


def test_chunk_offsets_locate_the_chunk_in_the_document():
    text = "# Intro\n\nHello there.\n\n# Body\n\n" + sentences(80)
    for chunk in chunk_text(text, target_tokens=80, overlap_tokens=10):
        located = text[chunk.start : chunk.end]
        assert located.startswith(chunk.text[:20])
        assert located.endswith(chunk.text[-20:])


def test_chunking_is_deterministic():
    text = "# A\n\n" + sentences(100) + "\n\n## B\n\n" + sentences(50)
    assert chunk_text(text, target_tokens=90) == chunk_text(text, target_tokens=90)


def test_target_tokens_must_be_positive():
    with pytest.raises(ValueError):
        chunk_text("text", target_tokens=0)
