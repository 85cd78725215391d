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
