"""Excerpts of earlier conversations as the reply prompt shows them, and their packing into a budget.

``memory.episodes.recall_ranked`` finds the pieces (a message that bears on the question, with
the neighbouring turns it needs), best first; :func:`pack_excerpts` is the one place a budget
is applied to them: best first while the rendered text fits, neighbouring turns of a chat
joined into one excerpt, the same words shown once, then shown oldest first. The reply prompt
(``prompts.reply_prompt.build_prompt``) packs them into what the other sections leave.

An excerpt is a ``core.contracts.Excerpt``: ``{thread_id, chat_title, score, lines: [ExcerptLine]}``.
A relative date in a line ("yesterday") is shown with the date it meant, against the line's
own time (``core.past_dates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

from core.contracts import Excerpt, ExcerptLine
from core.past_dates import PHRASE_CONTEXT_CHARS, day_text, resolve_relative
from core.text_validation import shortened
from core.tokens import count_tokens

__all__ = [
    "EXCERPT_LINE_CHARS", "EXCERPT_SEPARATOR", "TITLE_CHARS", "excerpt_date", "excerpt_line", "excerpt_piece",
    "pack_excerpts", "render_excerpt", "render_excerpts",
]

# One block per run of neighbouring messages of a chat, headed by its date and chat title; a
# line says who spoke, and its own date when the block spans days.
EXCERPT_SEPARATOR = "\n\n"
# A chat title is shown up to this long in an excerpt's header.
TITLE_CHARS = 60
# A longer message is cut here: an excerpt reminds, the history tool reads whole messages.
EXCERPT_LINE_CHARS = 700
# Relative dates ("yesterday") shown with the date they meant (docs/episodic-memory.md: its measure).
RESOLVE_DATES = True


def excerpt_date(when: datetime) -> str:
    """A line's or an excerpt's date: the UTC day, written as the dates its relative phrases meant
    (``core.past_dates.day_text``), whatever zone the time was read back in."""
    return day_text(when)


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def excerpt_line(role: str, text: str, date: str = "", said: datetime | None = None) -> str:
    """One message: who, its date when the excerpt's header does not give it, its words (relative
    dates resolved against ``said``, cut at ``EXCERPT_LINE_CHARS``)."""
    words = " ".join(text.split())
    if said is not None and RESOLVE_DATES:
        # Only what can be shown is read, with the stretch its phrases look past: reading a whole
        # 20,000-character message of date phrases cost ~0.4 s at each rendering.
        words = resolve_relative(words[: EXCERPT_LINE_CHARS + PHRASE_CONTEXT_CHARS], said)
    words = shortened(words, EXCERPT_LINE_CHARS)
    return f"{role}{f' ({date})' if date else ''}: {words}"


def _first_date(excerpt: Excerpt) -> str:
    lines = excerpt.get("lines") or []
    return excerpt_date(min(_when(l["sent_at"]) for l in lines)) if lines else ""


def render_excerpt(excerpt: Excerpt, *, before: Excerpt | None = None) -> str:
    """One excerpt: a header with its date and chat title, then a line per message. After an excerpt
    of the same chat (``before``) the header is the date alone, and after one of the same chat and
    day it is "…": the same conversation, a little later."""
    lines = excerpt.get("lines") or []
    if not lines:
        return ""
    first = _first_date(excerpt)
    same_chat = before is not None and before.get("thread_id") == excerpt.get("thread_id")
    if same_chat and _first_date(before) == first:
        out = ["…"]
    elif same_chat:
        out = [f"[{first}]"]
    else:
        out = [f'[{first}, "{(excerpt.get("chat_title") or "a chat")[:TITLE_CHARS]}"]']
    for line in lines:
        said = _when(line["sent_at"])
        date = excerpt_date(said)
        out.append(excerpt_line(line["role"], line["text"], "" if date == first else date, said))
    return "\n".join(out)


def excerpt_piece(excerpt: Excerpt, *, before: Excerpt | None = None) -> str:
    """What ``excerpt`` adds to the rendering after ``before`` (None: it comes first): its separator
    and itself. It depends on ``before`` only through its chat and first date."""
    part = render_excerpt(excerpt, before=before)
    if not part or before is None:
        return part
    # A "…" excerpt continues the one before it: a line break, not a blank line, between them.
    return ("\n" if part.startswith("…") else EXCERPT_SEPARATOR) + part


def render_excerpts(excerpts: Sequence[Excerpt]) -> str:
    """The excerpts in the order given (``pack_excerpts`` chose and ordered them within a budget)."""
    text = ""
    before = None
    for e in excerpts:
        piece = excerpt_piece(e, before=before)
        if piece:
            text, before = text + piece, e
    return text


# --------------------------------------------------------------------------- packing
@dataclass
class _Line:
    message_id: str
    position: int
    role: str
    sent_at: datetime
    text: str


@dataclass
class _Block:
    thread_id: str
    lines: dict[int, _Line] = field(default_factory=dict)
    score: float = 0.0
    # What the packing asks of a block again and again, computed once per set of lines (set_lines resets them).
    _key: tuple | None = field(default=None, repr=False, compare=False)
    _first: datetime | None = field(default=None, repr=False, compare=False)
    _first_date: str | None = field(default=None, repr=False, compare=False)

    def set_lines(self, lines: dict[int, _Line]) -> None:
        self.lines, self._key, self._first, self._first_date = lines, None, None, None

    def key(self) -> tuple:
        if self._key is None:
            self._key = (self.thread_id, tuple(sorted(self.lines)))
        return self._key

    def first_time(self) -> datetime:
        if self._first is None:
            self._first = min(l.sent_at for l in self.lines.values())
        return self._first

    def first_date(self) -> str:
        """The date its excerpt is headed by."""
        if self._first_date is None:
            self._first_date = excerpt_date(self.first_time())
        return self._first_date

    def touches(self, low: int, high: int) -> bool:
        """Whether messages at positions low..high would continue this block (or overlap it)."""
        return low <= max(self.lines) + 1 and high >= min(self.lines) - 1


class _Rendering:
    """``render_excerpts`` of a list of blocks, built from pieces rendered once each: what an excerpt
    adds after its predecessor (``excerpt_piece``) depends on the predecessor only through its chat
    and first date, so a block renders at most three ways. Rendering every trial list whole made
    packing quadratic (~150 ms for 40 excerpts on 2 busy cores)."""

    def __init__(self, titles: dict[str, str]) -> None:
        self.titles = titles
        self.pieces: dict[tuple, str] = {}

    @staticmethod
    def in_order(blocks: Sequence[_Block]) -> list[_Block]:
        """Oldest first, as the prompt shows them."""
        return sorted(blocks, key=_Block.first_time)

    def text(self, blocks: Sequence[_Block]) -> str:
        out, before = [], None
        for b in blocks:
            after = None if before is None else (before.thread_id, before.first_date())
            key = (after, b.key())
            piece = self.pieces.get(key)
            if piece is None:
                previous = None if before is None else _as_excerpts([before], self.titles)[0]
                piece = self.pieces[key] = excerpt_piece(_as_excerpts([b], self.titles)[0], before=previous)
            out.append(piece)
            before = b
        return "".join(out)


def _as_excerpts(blocks: Sequence[_Block], titles: dict[str, str]) -> list[Excerpt]:
    return [
        Excerpt(
            thread_id=b.thread_id,
            chat_title=titles.get(b.thread_id, ""),
            score=round(b.score, 5),
            lines=[
                ExcerptLine(message_id=l.message_id, position=l.position, role=l.role, sent_at=l.sent_at.isoformat(), text=l.text)
                for _, l in sorted(b.lines.items())
            ],
        )
        for b in blocks
    ]


def pack_excerpts(ranked: Sequence[Excerpt], budget: int) -> list[Excerpt]:
    """The excerpts to show, oldest first, within ``budget`` tokens as rendered: ``ranked`` (best
    first; an excerpt's first line is the message found, the others its neighbours) taken while
    they fit, a later smaller one still tried after one that does not. An excerpt touching one of
    the same chat already taken joins it; a message already shown, or the same words said again,
    is not taken twice."""
    if budget <= 0:
        return []
    titles = {e["thread_id"]: e.get("chat_title") or "" for e in ranked}
    blocks: list[_Block] = []
    seen_text: set[str] = set()
    rendering = _Rendering(titles)
    unplaced = -(10**12)  # an excerpt without positions stands alone: positions far from any other's
    for e in ranked:
        given = e.get("lines") or []
        placed = all(l.get("position") is not None for l in given)
        lines = [
            _Line(l["message_id"], int(l["position"]) if placed else unplaced + j, l["role"], _when(l["sent_at"]), l["text"])
            for j, l in enumerate(given)
        ]
        unplaced += 0 if placed else 10**6
        if not lines:
            continue
        main = lines[0]
        if any(b.thread_id == e["thread_id"] and main.position in b.lines for b in blocks):
            continue  # already shown as a neighbour of a better match
        norm = " ".join(main.text.casefold().split())
        if norm in seen_text:
            continue  # the same words said again add nothing
        low, high = min(l.position for l in lines), max(l.position for l in lines)
        block = next((b for b in blocks if b.thread_id == e["thread_id"] and b.touches(low, high)), None)
        trial = [*blocks] if block else [*blocks, _Block(e["thread_id"], score=float(e.get("score") or 0.0))]
        target = block or trial[-1]
        before = target.lines
        target.set_lines({**before, **{l.position: l for l in lines}})
        # The cost as the prompt renders it, oldest first (dates, titles, separators): the budget holds exactly.
        if count_tokens(rendering.text(rendering.in_order(trial))) > budget:
            target.set_lines(before)  # a smaller later one may still fit
            continue
        blocks = trial
        seen_text.add(norm)
    return _as_excerpts(rendering.in_order(blocks), titles)
