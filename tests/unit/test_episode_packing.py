"""recall packs excerpts into their budget from pieces rendered once: the text it counts is exactly
what the prompt renders, whatever the blocks and their order."""

import random
from datetime import datetime, timedelta, timezone

from prompts.excerpts import _as_excerpts, _Block, _Line, _Rendering
from prompts.reply_prompt import render_excerpts


def _block(thread: int, positions: list[int], start: datetime) -> _Block:
    block = _Block(f"t{thread}")
    for p in positions:
        block.lines[p] = _Line(f"m{thread}-{p}", p, "user" if p % 2 == 0 else "assistant", start + timedelta(hours=7 * p), f"said {p} in {thread}")
    return block


def test_the_text_built_from_pieces_is_what_render_excerpts_gives_for_any_list_of_blocks():
    rng = random.Random(7)
    start = datetime(2024, 3, 1, tzinfo=timezone.utc)
    titles = {"t0": "Trip", "t1": "Work", "t2": ""}
    rendering = _Rendering(titles)
    for _ in range(300):
        blocks = []
        for _ in range(rng.randint(1, 6)):
            first = rng.randint(0, 12)
            blocks.append(_block(rng.randint(0, 2), list(range(first, first + rng.randint(1, 3))), start))
        ordered = rendering.in_order(blocks)
        assert rendering.text(ordered) == render_excerpts(_as_excerpts(ordered, titles))


def test_a_long_line_is_read_for_dates_only_as_far_as_it_is_shown_and_reads_the_same():
    """A recalled 20,000-character message of date phrases was read whole at each rendering (~0.4 s,
    twice a prompt) to show its first 700 characters (a review's fuzzing, stop 62)."""
    import prompts.excerpts as excerpts
    from core.past_dates import resolve_relative

    said = datetime(2023, 5, 8, 12, tzinfo=timezone.utc)
    rng = random.Random(3)
    phrases = ["yesterday", "last week", "for 2 years now", "on the 5th", "2 years ago", "this weekend", "the other day"]
    for _ in range(30):  # texts of ~1,000-4,000 characters: phrases on both sides of the cut, and far past it
        text = " ".join(rng.choice(phrases + ["I went out", "we met.", "and then", "it was fun!"]) for _ in range(rng.randint(100, 400)))
        whole = resolve_relative(text, said)
        shown = whole if len(whole) <= excerpts.EXCERPT_LINE_CHARS else whole[: excerpts.EXCERPT_LINE_CHARS - 1].rstrip() + "…"
        assert excerpts.excerpt_line("user", text, said=said) == f"user: {shown}"

    read: list[int] = []
    real = excerpts.resolve_relative
    excerpts.resolve_relative = lambda words, when: (read.append(len(words)), real(words, when))[1]
    try:
        excerpts.excerpt_line("user", "yesterday " * 2000, said=said)
    finally:
        excerpts.resolve_relative = real
    assert read == [excerpts.EXCERPT_LINE_CHARS + excerpts.PHRASE_CONTEXT_CHARS]
