"""One token counter for every budget: a section built within its budget stays within it."""

from langchain_core.messages import HumanMessage

from core.tokens import TRIM_MARKER, count_tokens, fit_blocks, truncate_lines
from prompts.reply_prompt import KNOWLEDGE_HEADER, build_prompt, chunk_cost, parse_sections


def _chunk(i: int, chars: int) -> dict:
    source, index, heading = f"guide-{i}.md", i, f"Guide {i} > Setup"
    content = (f"Chunk {i} body. " * 200)[:chars].rstrip() + f" END{i}"
    return {"citation": f"{source}#{index}", "heading_path": heading, "content": content,
            "tokens": chunk_cost(f"{source}#{index}", heading, content)}


def test_chunks_whose_costs_fit_the_knowledge_budget_render_within_it_and_uncut():
    """Retrieval is the one place the knowledge budget is applied; the prompt shows what it chose, whole."""
    # Six chunks costed as retrieval costs them, filling the 1,200-token budget almost exactly.
    chunks = [_chunk(i, 760) for i in range(6)]
    assert sum(c["tokens"] for c in chunks) <= 1200
    built = build_prompt(persona_text="You help.", loaded_context={}, summary_text="", knowledge=chunks,
                         recent=[], current=HumanMessage("setup?"))
    section = parse_sections(built.messages)[KNOWLEDGE_HEADER]
    assert count_tokens(section) <= 1200
    assert built.section_tokens["knowledge"] <= 1200
    for i in range(6):  # every chunk whole: its last word is there
        assert f"END{i}" in section


def test_truncated_lines_with_their_marker_stay_within_the_budget():
    text = "\n".join(f"- fact number {i} about the user" for i in range(200))
    for budget in (10, 37, 100, 333):
        cut = truncate_lines(text, budget)
        assert count_tokens(cut) <= budget
        assert cut.endswith(TRIM_MARKER)
        kept = cut.splitlines()[:-1]
        assert all(line in text.splitlines() for line in kept) or (len(kept) == 1 and text.startswith(kept[0]))


def test_a_first_line_longer_than_the_budget_is_shown_by_its_leading_words_not_dropped():
    narrative = " ".join(f"word{i}" for i in range(400))  # a summary's one long paragraph
    cut = truncate_lines(f"{narrative}\nKey facts: a; b", 50)

    assert count_tokens(cut) <= 50 and cut.endswith(TRIM_MARKER)
    assert cut.startswith("word0 word1 ") and narrative.startswith(cut.splitlines()[0])
    assert not cut.splitlines()[0].endswith("wor")  # cut between words


def test_fit_blocks_keeps_leading_whole_blocks():
    assert fit_blocks(["aaaa", "bbbb", "cccc"], 3, "\n\n") == ["aaaa", "bbbb"]
    assert fit_blocks(["a" * 40], 5) == []
