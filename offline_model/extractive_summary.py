"""Extractive summaries: the offline model's stand-in for the summarize and recompress calls.

Not an LLM and not abstractive: every sentence in the board is copied from the
conversation (or from the previous board). Sentences are scored by simple,
deterministic signals of informativeness (proper nouns, numbers, first-person
statements, length), and the board is folded incrementally exactly like the
LLM path: previous board + newly folded transcript lines in, new board out.

The board's ``summary`` always starts with ``(extractive) `` so nobody mistakes it
for an LLM summary.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from core.stopwords import FILLER, LOW_CONTENT, STOPWORDS, VAGUE
from core.tokens import count_tokens
from core.schemas import SummaryBoard, normalize_text
from core.words import words_and_numbers

__all__ = [
    "EXTRACTIVE_PREFIX",
    "OFFLINE_REPLY_PREFIX",
    "compress_extractively",
    "extract_topics",
    "fold_extractively",
    "parse_transcript",
    "score_sentence",
    "split_sentences",
    "strip_prefix",
]

EXTRACTIVE_PREFIX = "(extractive) "
OFFLINE_REPLY_PREFIX = "(offline model)"

MAX_KEY_FACTS = 20
MAX_ENTITIES = 15
MAX_TOPICS = 6
MAX_ACTION_ITEMS = 8
MAX_PENDING = 5
MIN_SCORE = 3  # new sentences scoring below this never enter the summary

_STOPWORDS = STOPWORDS | VAGUE | FILLER | LOW_CONTENT

_GREETING_WORDS = frozenset(
    """
    hi hello hey hiya thanks thank you ok okay bye goodbye ciao grazie shalom sure yes no cool great good
    morning evening afternoon night nice there welcome please perfect got it yeah yep nope awesome fine
    buongiorno buonasera salve prego אוקיי שלום תודה היי בוקר טוב ערב lot so much very
    """.split()
)

_WEEKDAYS_MONTHS = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december
    """.split()
)

_FIRST_PERSON = re.compile(
    r"\b(?:I|I'm|I've|I'll|I'd|my|me|mine|we|our|us|io|mi|mio|mia|sono|ho|vivo|lavoro)\b|(?:^|\s)(?:אני|שלי|אנחנו)(?:\s|$)",
    re.I,
)
_ACTION_USER = re.compile(
    r"\bremind me\b|\bI need to\b|\bto-?do\b|\blet's\b|\blet us\b|\bI will\b|\bI'll\b|\bdon't let me forget\b"
    r"|\bricordami\b|\bdevo\b|תזכיר",
    re.I,
)
_ACTION_ASSISTANT = re.compile(r"\blet's\b|\blet us\b", re.I)
_LINE = re.compile(r"^\s*\[(?P<role>[^\]]+)\]\s?(?P<text>.*)$")
_CALLED = re.compile(r"\s*\(called .*\)\s*$")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=\S)|\n+")
_CAPITALIZED = re.compile(r"^[A-Z][\w'’.-]*$")
_I_FORMS = frozenset({"I", "I'm", "I've", "I'll", "I'd", "Im", "OK", "Ok"})
_CONNECTORS = frozenset({"of", "de", "da", "di", "del", "van", "von", "la", "le", "al", "el", "bin"})


# --------------------------------------------------------------------------- transcript
@dataclass(frozen=True)
class Turn:
    role: str  # "user", "assistant", "tool", "system" or "other"
    text: str
    echo: bool = False  # an offline-model reply: it only repeats memory, so it is never summarized


def parse_transcript(lines: Iterable[str] | str) -> list[Turn]:
    """``[user] …`` / ``[assistant] …`` / ``[tool name] …`` lines (see memory.summarizer.render_transcript)."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    turns: list[Turn] = []
    for line in lines:
        line = (line or "").strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            turns.append(Turn("other", line))
            continue
        label = m.group("role").strip().lower()
        text = m.group("text").strip()
        if label in ("user", "human"):
            role = "user"
        elif label in ("assistant", "ai"):
            role = "assistant"
            text = _CALLED.sub("", text)
        elif label.startswith("tool"):
            role = "tool"
        elif label == "system":
            role = "system"
        else:
            role = "other"
        if text:
            turns.append(Turn(role, text, echo=role == "assistant" and text.startswith(OFFLINE_REPLY_PREFIX)))
    return turns


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text or "") if s and s.strip()]


def strip_prefix(summary: str) -> str:
    summary = (summary or "").strip()
    while summary.startswith(EXTRACTIVE_PREFIX.strip()):
        summary = summary[len(EXTRACTIVE_PREFIX.strip()) :].strip()
    return summary


# --------------------------------------------------------------------------- signals
def _tokens(sentence: str) -> list[str]:
    return words_and_numbers(sentence)


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith("?")


def _is_greeting(sentence: str) -> bool:
    words = [w.lower().strip("'’") for w in _tokens(sentence) if not w[0].isdigit()]
    return not words or all(w in _GREETING_WORDS for w in words)


def _mid_capitals(sentence: str) -> list[str]:
    """Capitalized words that are not the first word of the sentence (a cheap proper-noun signal)."""
    toks = _tokens(sentence)
    return [t for t in toks[1:] if _CAPITALIZED.match(t) and t not in _I_FORMS and t.lower() not in _STOPWORDS]


def _numbers(sentence: str) -> int:
    return sum(1 for t in _tokens(sentence) if t[0].isdigit())


def _first_person(sentence: str) -> bool:
    return bool(_FIRST_PERSON.search(sentence))


def score_sentence(sentence: str, role: str) -> int:
    """Informativeness: proper nouns, numbers, first-person statements, a mid-range length."""
    n = len(_tokens(sentence))
    score = 2 * min(len(_mid_capitals(sentence)), 3) + 2 * min(_numbers(sentence), 2)
    if role == "user":
        score += 1 + (2 if _first_person(sentence) else 0)
    if 6 <= n <= 25:
        score += 2
    elif 4 <= n <= 40:
        score += 1
    return score


def _entities(sentences: Sequence[str]) -> list[str]:
    """Runs of capitalized words not at sentence start ("Tel Aviv", "Rex"), plus sentence-start words seen mid-sentence."""
    found: list[str] = []
    starts: list[str] = []
    for sentence in sentences:
        toks = [t.strip(".'’-") for t in sentence.split()]
        toks = [re.sub(r"['’]s$", "", re.sub(r"^[\"“(\[]+|[\"”),:;!?\]]+$", "", t)) for t in toks]
        run: list[str] = []
        for i, tok in enumerate(toks + [""]):
            cap = bool(tok) and _CAPITALIZED.match(tok) and tok not in _I_FORMS and tok.lower() not in _STOPWORDS
            if cap and i > 0:
                run.append(tok)
                continue
            if run and tok.lower() in _CONNECTORS and i + 1 < len(toks) and _CAPITALIZED.match(toks[i + 1] or ""):
                run.append(tok)
                continue
            if run:
                found.append(" ".join(run))
                run = []
            if cap and i == 0:
                starts.append(tok)
    known = {f.lower() for f in found} | {w.lower() for f in found for w in f.split()}
    for tok in starts:
        if tok.lower() in known:
            found.append(tok)
    out: list[str] = []
    for e in found:
        if e.lower() in _WEEKDAYS_MONTHS or not any(c.isalpha() for c in e):
            continue
        out.append(e)
    return out


def _content_words(text: str) -> list[str]:
    words = []
    for tok in _tokens(text):
        w = tok.lower().strip("'’-")
        if w.endswith("'s") or w.endswith("’s"):
            w = w[:-2]
        if w in _STOPWORDS or w in _GREETING_WORDS or w in _WEEKDAYS_MONTHS or w[0].isdigit():
            continue
        if len(w) < (2 if re.match(r"[\u0590-\u05FF]", w) else 3):
            continue
        words.append(w)
    return words


def extract_topics(texts: Sequence[str], previous: Sequence[str] = (), limit: int = MAX_TOPICS) -> list[str]:
    """Top content words by frequency; earlier topics count once more and win ties, so they do not flicker."""
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for topic in previous:
        t = topic.strip().lower()
        if t:
            counts[t] += 1
            first_seen.setdefault(t, len(first_seen))
    for text in texts:
        for w in _content_words(text):
            counts[w] += 1
            first_seen.setdefault(w, len(first_seen))
    ranked = sorted(counts, key=lambda w: (-counts[w], first_seen[w]))
    return ranked[:limit]


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = item.strip()
        key = normalize_text(item)
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _dedupe_ci(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = item.strip().casefold()
        if key and key not in seen:
            seen.add(key)
            out.append(item.strip())
    return out


def _items(items: Iterable[str]) -> list[str]:
    """List entries without a trailing full stop (the board renders them joined by "; ")."""
    return [i.strip().rstrip(".") for i in items if i and i.strip().rstrip(".")]


def _newest(items: list[str], cap: int) -> list[str]:
    return items[-cap:] if len(items) > cap else items


# --------------------------------------------------------------------------- fold
def fold_extractively(previous: SummaryBoard | None, transcript_lines: Sequence[str] | str, max_sentences: int = 6) -> SummaryBoard:
    """Previous board + the transcript lines being folded → the new board (extractive, deterministic)."""
    previous = previous or SummaryBoard()
    max_sentences = max(1, int(max_sentences))
    turns = parse_transcript(transcript_lines)

    # Which user turns got a real answer later in this fold (an offline echo is not an answer).
    last_real_answer = max((i for i, t in enumerate(turns) if t.role == "assistant" and not t.echo), default=-1)

    # (score, order, text): previous sentences first (older, so a one-point handicap), then new ones.
    candidates: list[tuple[int, int, str]] = []
    seen = set()
    for sentence in split_sentences(strip_prefix(previous.summary)):
        key = normalize_text(sentence)
        if key and key not in seen:
            seen.add(key)
            candidates.append((score_sentence(sentence, "user") - 1, len(candidates), sentence))

    key_facts = list(previous.key_facts)
    action_items = list(previous.action_items)
    pending = [] if last_real_answer >= 0 else list(previous.pending_questions)
    content: list[str] = []  # sentences that feed entities and topics

    for index, turn in enumerate(turns):
        if turn.role not in ("user", "assistant") or turn.echo:
            continue
        for sentence in split_sentences(turn.text):
            if _is_greeting(sentence):
                continue
            content.append(sentence)
            if turn.role == "user" and _ACTION_USER.search(sentence) or turn.role == "assistant" and _ACTION_ASSISTANT.search(sentence):
                action_items.append(sentence)
            if _is_question(sentence):
                if turn.role == "user" and index > last_real_answer:
                    pending.append(sentence)
                continue
            if turn.role == "user" and _first_person(sentence) and (_numbers(sentence) or _mid_capitals(sentence)):
                key_facts.append(sentence)
            score = score_sentence(sentence, turn.role)
            key = normalize_text(sentence)
            if score >= MIN_SCORE and key not in seen:
                seen.add(key)
                candidates.append((score, len(candidates), sentence))

    # Too many sentences: drop the least informative, the oldest first among equals.
    # One sort: dropping them one at a time was quadratic in a fold's sentences.
    kept = sorted(candidates, key=lambda c: (c[0], c[1]))[-max_sentences:]
    kept.sort(key=lambda c: c[1])
    summary = " ".join(c[2] for c in kept)

    return SummaryBoard(
        summary=EXTRACTIVE_PREFIX + summary if summary else "",
        key_facts=_newest(_dedupe(_items(key_facts)), MAX_KEY_FACTS),
        entities=_newest(_dedupe_ci([*previous.entities, *_entities(content)]), MAX_ENTITIES),
        topics=extract_topics(content, previous.topics),
        action_items=_newest(_dedupe(_items(action_items)), MAX_ACTION_ITEMS),
        pending_questions=_newest(_dedupe(pending), MAX_PENDING),
    )


# --------------------------------------------------------------------------- recompress
def _board_tokens(board: SummaryBoard) -> int:
    return count_tokens(board.render())


def _drop_summary_sentence(board: SummaryBoard, keep_at_least: int) -> bool:
    sentences = split_sentences(strip_prefix(board.summary))
    if len(sentences) <= keep_at_least:
        return False
    scored = [(score_sentence(s, "user"), i) for i, s in enumerate(sentences)]
    _, drop = min(scored)
    del sentences[drop]
    board.summary = EXTRACTIVE_PREFIX + " ".join(sentences) if sentences else ""
    return True


def _drop_duplicate_summary_sentence(board: SummaryBoard) -> bool:
    """A summary sentence that is also a key fact is said twice: drop it from the summary (keep one sentence)."""
    sentences = split_sentences(strip_prefix(board.summary))
    facts = {normalize_text(f) for f in board.key_facts}
    for i, sentence in enumerate(sentences):
        if len(sentences) > 1 and normalize_text(sentence) in facts:
            del sentences[i]
            board.summary = EXTRACTIVE_PREFIX + " ".join(sentences)
            return True
    return False


def _drop_from(board: SummaryBoard, field: str, keep_at_least: int, *, newest_first: bool = False) -> bool:
    items = list(getattr(board, field))
    if len(items) <= keep_at_least:
        return False
    items.pop(-1 if newest_first else 0)
    setattr(board, field, items)
    return True


def _shorten_summary(board: SummaryBoard) -> bool:
    text = strip_prefix(board.summary)
    if not text:
        return False
    words = text.rstrip("…").split()
    if len(words) <= 1:
        board.summary = ""
        return True
    board.summary = EXTRACTIVE_PREFIX + " ".join(words[: max(1, len(words) * 3 // 4)]) + "…"
    return True


def compress_extractively(board: SummaryBoard, max_tokens: int) -> SummaryBoard:
    """Drop the least valuable parts of ``board`` until its rendered text fits ``max_tokens`` (chars/4).

    Order: surplus pending questions and action items, surplus entities and topics, the least
    informative summary sentences, the oldest key facts, then everything else; as a last resort
    the summary is cut short. Nothing is rewritten, only removed.
    """
    out = board.model_copy(deep=True)
    max_tokens = max(0, int(max_tokens))
    steps = (
        lambda b: _drop_from(b, "pending_questions", 2),
        lambda b: _drop_from(b, "action_items", 3),
        lambda b: _drop_from(b, "entities", 6),
        lambda b: _drop_from(b, "topics", 3, newest_first=True),
        _drop_duplicate_summary_sentence,
        lambda b: _drop_summary_sentence(b, 2),
        lambda b: _drop_from(b, "key_facts", 3),
        lambda b: _drop_from(b, "pending_questions", 0),
        lambda b: _drop_from(b, "action_items", 0),
        lambda b: _drop_summary_sentence(b, 1),
        lambda b: _drop_from(b, "topics", 0, newest_first=True),
        lambda b: _drop_from(b, "entities", 0),
        lambda b: _drop_from(b, "key_facts", 0),
        _shorten_summary,
    )
    while _board_tokens(out) > max_tokens:
        if not any(step(out) for step in steps):
            break
    if _board_tokens(out) > max_tokens:
        out = SummaryBoard()
    return out
