"""When a chat's title is (re)generated.

A new chat is titled from its first exchange as soon as the first reply is written: by
the model when there is one (the title prompt on the first user message and reply), by
:func:`keyword_title` offline or when that call fails. Once a summary exists the model
titles it again from the summary board, and remembers the topics it titled. The title is
regenerated only when the focus shifts: when fewer than a third of the board's current
topics were among the titled ones (Jaccard overlap of lowercased topic labels < 1/3).
A title the user set (``ChatRecord.title_by_user``) is never replaced, by either kind.
"""

from __future__ import annotations

import re

from core.stopwords import STOPWORDS, VAGUE
from core.schemas import NEW_CHAT_TITLE, ChatRecord, SummaryBoard

FOCUS_SHIFT_OVERLAP = 1 / 3
PROVISIONAL_WORDS = 7
PROVISIONAL_CHARS = 80
KEYWORD_TITLE_WORDS = 7

# A clause that only greets or introduces the writer says nothing about what the chat is for.
_GREETING = re.compile(
    r"^(hi|hello|hey|hiya|ciao|salve|shalom|good (morning|afternoon|evening)|buongiorno|buonasera|thanks|thank you|"
    r"ok|okay|well|so|yes|yeah|שלום|היי)( there| all| everyone)?$",
    re.I,
)
_INTRODUCTION = re.compile(
    r"^(my name is|my name's|mi chiamo|call me|this is)\b"
    r"|^(i'm|i am|im|sono)\s+(a|an|un|una|the)\s+\S+(\s+\S+)?(\s+(at|in|from|for)\s+\S+)?$",
    re.I,
)
_INTRODUCTION_NAME = re.compile(r"^(?i:i'm|i am|im|sono)\s+[A-Z][\w'-]*$")  # "I'm Maya" but not "I'm tired"
# Openings of a request that are not its topic: "how do I make bread" is about making bread.
_LEADING_FILLER = re.compile(
    r"^((so|well|ok|okay|also|and|but|please|hey|hi)\b[,!]?\s*)*"
    r"((can|could|would|will) you( please)?( help me)?( to)?|please|help me( to)?|i (want|need|would like|'d like) to|"
    r"i'd like to|how (do|can|should|would) (i|we|you)|how to|tell me|let's talk about|let's|i have a question about|"
    r"question about|quick question:?)?\s*",
    re.I,
)
# A title does not end on a function word ("Trip to" -> "Trip"), nor on a word that leads on ("next", "getting").
_EDGE_WORDS = STOPWORDS | VAGUE | frozenset("next last getting since".split())
_CLAUSES = re.compile(r"(?<=[.!?;:])\s+|[,;:()]\s*|\s+[-–—]\s+|\s+(?:and|but|ma|e)\s+(?=(?:i|my|we|our|io)\b)", re.I)


def _is_introduction(clause: str) -> bool:
    stripped = clause.strip(" .!?")
    return bool(_GREETING.match(stripped) or _INTRODUCTION.match(stripped) or _INTRODUCTION_NAME.match(stripped))


def keyword_title(first_user_message: str) -> str:
    """A title from the opening message without a model: its first clause that is neither a
    greeting nor an introduction, without request filler ("can you", "how do I"), cut to
    seven words at a content word, and at most 80 characters. "Hi! I'm Maya, and my bank charged
    me twice" → "My bank charged me twice". Falls back to :func:`provisional_title`.
    """
    text = " ".join(first_user_message.split())
    for clause in _CLAUSES.split(text):
        clause = (clause or "").strip(" .!?\"'")
        if not clause or _is_introduction(clause):
            continue
        clause = _LEADING_FILLER.sub("", clause, count=1).strip(" .!?,\"'")
        words = clause.split()[:KEYWORD_TITLE_WORDS]
        while words and words[-1].lower().strip(".,!?") in _EDGE_WORDS:
            words.pop()
        while words and words[0].lower() in {"the", "a", "an", "to"}:
            words.pop(0)
        if words and any(len(w) > 2 for w in words):
            title = " ".join(words).strip(" ,.;:!?")
            if len(title) > PROVISIONAL_CHARS:  # a long "word" (a URL, a paste)
                title = title[:PROVISIONAL_CHARS].rstrip() + "…"
            return title[:1].upper() + title[1:]
    return provisional_title(first_user_message)


def provisional_title(first_user_message: str) -> str:
    words = first_user_message.split()
    title = " ".join(words[:PROVISIONAL_WORDS]).strip(" ,.;:!?")
    cut = len(words) > PROVISIONAL_WORDS or len(title) > PROVISIONAL_CHARS  # a long "word" (a URL, a paste) too
    return (title[:PROVISIONAL_CHARS].rstrip() + ("…" if cut else "")) or NEW_CHAT_TITLE


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
