"""Finding "the chat about …": chat summaries ranked by similarity, shared words and recency.

    score = 0.7 · similarity + 0.15 · words + 0.15 · recency,   recency = 0.5 ^ (age_days / 14)

- similarity: cosine (0..1) between the query and the chat's searchable text, from pgvector
  via the store;
- words: the share of the query's content words (not stop words, plural "s" ignored) that
  the chat's title and searchable text contain: "the bank" names the bank chat outright, which
  a short query's embedding says only faintly;
- age_days: days since the chat's last activity, so a chat from today gets the full
  0.15 and one from two weeks ago 0.075.

Only chats with similarity ≥ ``MIN_SIMILARITY`` are candidates. The answer is *one*
clear match when the best score is ≥ ``CLEAR_SCORE`` and leads the next candidate by
≥ ``CLEAR_MARGIN``; otherwise *several* candidates with their scores, so the client
can ask which one was meant; or *none*.

What is searched is each chat's ``summary_text`` (written by the record_chat node every turn):
its title, its opening message, the summary board once there is one, and its newest user
lines, so a chat is found by what it is about before its first fold too.

:func:`switch_request` recognises a message asking to go to another chat ("go back to the
chat about the bank") and :func:`chat_query` strips such framing from a search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from core.stopwords import CHAT_WORDS, STOPWORDS
from core.schemas import ChatRecord, utcnow
from core.words import light_stem, word_runs
from embeddings.calibration import CALIBRATED
from memory.chat_admin import owned_ids
from memory.user_memory import age_days, search_chat_summaries

W_SIMILARITY, W_WORDS, W_RECENCY = 0.7, 0.15, 0.15
RECENCY_HALF_LIFE_DAYS = 14.0
MIN_SIMILARITY = CALIBRATED.chat_candidate
CLEAR_SCORE = CALIBRATED.chat_clear_score
CLEAR_MARGIN = CALIBRATED.chat_clear_margin
MAX_CANDIDATES = 5
FORMULA = (
    f"score = {W_SIMILARITY}·similarity + {W_WORDS}·words + {W_RECENCY}·recency, words = share of the query's content "
    f"words the chat contains, recency = 0.5^(age_days/{RECENCY_HALF_LIFE_DAYS:g}); "
    f"one clear match when the top score ≥ {CLEAR_SCORE} and ≥ {CLEAR_MARGIN} above the next, "
    f"candidates need similarity ≥ {MIN_SIMILARITY}"
)


@dataclass(frozen=True)
class RankedChat:
    chat: ChatRecord
    similarity: float
    recency: float
    score: float
    words: float = 0.0


@dataclass(frozen=True)
class ChatLookup:
    outcome: Literal["one", "several", "none"]
    candidates: list[RankedChat]

    @property
    def match(self) -> RankedChat | None:
        return self.candidates[0] if self.outcome == "one" else None


def recency(last_activity: datetime, now: datetime) -> float:
    return 0.5 ** (age_days(last_activity, now) / RECENCY_HALF_LIFE_DAYS)


_STOP = STOPWORDS | CHAT_WORDS


def _words(text: str) -> set[str]:
    out = set()
    for w in word_runs(text.casefold()):
        if w in _STOP or len(w) < 3:
            continue
        out.add(light_stem(w, suffixes=("s",)))
    return out


def word_share(query: str, chat: ChatRecord) -> float:
    """The share of the query's content words found in the chat's title and searchable text."""
    wanted = _words(query)
    return len(wanted & _words(f"{chat.title}\n{chat.summary_text}")) / len(wanted) if wanted else 0.0


def rank(hits: list[tuple[ChatRecord, float]], now: datetime, query: str = "") -> list[RankedChat]:
    ranked = []
    for chat, similarity in hits:
        r, w = recency(chat.last_activity, now), word_share(query, chat)
        score = W_SIMILARITY * similarity + W_WORDS * w + W_RECENCY * r
        ranked.append(RankedChat(chat, round(similarity, 4), round(r, 4), round(score, 4), round(w, 4)))
    return sorted(ranked, key=lambda c: -c.score)


def decide(ranked: list[RankedChat]) -> ChatLookup:
    candidates = [c for c in ranked if c.similarity >= MIN_SIMILARITY][:MAX_CANDIDATES]
    if not candidates:
        return ChatLookup("none", [])
    top = candidates[0]
    runner_up = candidates[1].score if len(candidates) > 1 else 0.0
    if top.score >= CLEAR_SCORE and top.score - runner_up >= CLEAR_MARGIN:
        return ChatLookup("one", candidates)
    return ChatLookup("several", candidates)


async def ranked_chats(store, user_id: str, query: str, *, now: datetime | None = None, limit: int = 20) -> list[RankedChat]:
    """The user's own chats (by the owner table) most similar to ``query``, best score first (no floor applied)."""
    hits = await search_chat_summaries(store, user_id, query, limit=limit)
    mine = await owned_ids(store, user_id, (c.thread_id for c, _ in hits))
    return rank([(c, s) for c, s in hits if c.thread_id in mine], now or utcnow(), query)


async def find_chat(store, user_id: str, query: str, *, now: datetime | None = None) -> ChatLookup:
    return decide(await ranked_chats(store, user_id, query, now=now))


# "go back to / open / switch to … the chat about X", "where we talked about X", "torna alla chat su X".
_VERB = (
    r"(?:go(?:\s+back)?\s+to|get\s+back\s+to|back\s+to|return\s+to|switch(?:\s+back)?\s+to|jump\s+to|"
    r"take\s+me(?:\s+back)?\s+to|open(?:\s+up)?|re-?open|find|show(?:\s+me)?|continue(?:\s+with)?|resume|pick\s+up|"
    r"torna(?:re)?\s+a(?:lla|l)?|apri|riapri)"
)
_CHAT_NOUN = r"(?:chats?|conversations?|threads?|discussions?|talks?|conversazione|chat)"
_ABOUT = (
    r"(?:about|on|regarding|re:?|concerning|with|su(?:l|lla|i|gli)?|di|where\s+(?:we|i)\s+(?:\w+\s+){0,2}?"
    r"(?:talked|spoke|chatted|discussed|asked|were\s+talking|was\s+asking)(?:\s+about)?|that\s+was\s+about|"
    r"where|when|in\s+which)"
)
_POLITE = r"(?:(?:please|ok|okay|hey|so|now|can\s+you|could\s+you|would\s+you|let's|lets|i\s+want\s+to|i'd\s+like\s+to)[\s,]+)*"
_DET = r"(?:(?:the|my|our|that|this|la|le|il|quella)\s+)?(?:(?:old|earlier|previous|other|last|vecchia)\s+)?"
_SWITCH = re.compile(rf"^\s*{_POLITE}{_VERB}\s+{_DET}{_CHAT_NOUN}\s+{_ABOUT}\s+(?P<topic>.+?)[\s.?!]*$", re.I)
_FRAMING = re.compile(rf"^\s*{_POLITE}(?:{_VERB}\s+)?{_DET}(?:{_CHAT_NOUN}\s+{_ABOUT}|one\s+{_ABOUT}|{_ABOUT})\s+(?P<topic>.+?)[\s.?!]*$", re.I)
_TRAILING = re.compile(r"\s+(?:chat|conversation|thread|discussion)$", re.I)


def switch_request(text: str) -> str | None:
    """The topic of a message that asks to go to another chat, else None.

    "go back to the chat about the bank" → "the bank"; "can you open my conversation where we
    talked about Crete?" → "Crete". Only a short message of that shape counts: a longer one
    that merely mentions a chat is an ordinary message.
    """
    if len(text.split()) > 20:
        return None
    m = _SWITCH.match(text)
    return m.group("topic").strip() if m else None


def chat_query(text: str) -> str:
    """What to search for in a request for a chat: "the one about baking bread" → "baking bread"."""
    m = _FRAMING.match(text)
    topic = m.group("topic") if m else text
    return _TRAILING.sub("", topic.strip()).strip() or text.strip()
