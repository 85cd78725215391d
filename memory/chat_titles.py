"""When a chat's title is (re)generated.

A new chat is titled at once from its first user message (provisional), so the list
never shows "New chat" for long. Once a summary exists the model titles it from the
summary board, and remembers the topics it titled. The title is regenerated only
when the focus shifts: when fewer than a third of the board's current topics were
among the titled ones (Jaccard overlap of lowercased topic labels < 1/3).
A title the user set (``ChatRecord.title_by_user``) is never replaced, by either kind.
"""

from __future__ import annotations

from core.schemas import ChatRecord, SummaryBoard

FOCUS_SHIFT_OVERLAP = 1 / 3
PROVISIONAL_WORDS = 7
PROVISIONAL_CHARS = 80


def provisional_title(first_user_message: str) -> str:
    words = first_user_message.split()
    title = " ".join(words[:PROVISIONAL_WORDS]).strip(" ,.;:!?")
    cut = len(words) > PROVISIONAL_WORDS or len(title) > PROVISIONAL_CHARS  # a long "word" (a URL, a paste) too
    return (title[:PROVISIONAL_CHARS].rstrip() + ("…" if cut else "")) or "New chat"


def topic_overlap(a: list[str], b: list[str]) -> float:
    sa, sb = {t.casefold().strip() for t in a if t.strip()}, {t.casefold().strip() for t in b if t.strip()}
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def needs_model_title(chat: ChatRecord, board: SummaryBoard) -> bool:
    if chat.title_by_user or board.is_empty():
        return False
    if not chat.title_topics:  # titled provisionally so far
        return True
    return topic_overlap(chat.title_topics, board.topics) < FOCUS_SHIFT_OVERLAP
