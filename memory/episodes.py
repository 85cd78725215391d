"""Episodic memory: what was said, every message of every chat, searchable with its time.

The index (``storage.episodes``) is derived data, like a search index over the checkpoints:

- **written after the reply** (the index_messages node calls :func:`index_thread`), embeddings in
  batches, nothing before the first token. The step syncs the thread's rows with the thread's
  current branch: new messages are added, messages no longer on the branch (an edit or a
  regeneration forked the thread before them) are dropped, so a retraction needs no
  bookkeeping of its own, and a failed write is caught up on the next turn;
- **deleted** with the chat (``chat_admin.delete_chat``) and with the user (forget-me);
- **rebuilt** from the checkpoints by ``memory-agent reindex`` (:func:`rebuild`).

A message's time is ``core.messages.sent_at``; messages from before times were kept get the
time of the first checkpoint that holds them.

:func:`recall` chooses the excerpts load_context puts in the reply prompt: full text and
vectors fused (RRF), a relevance gate (unrelated messages get nothing), neighbouring turns
where a turn alone says little, packed into a token budget; each excerpt dated and named by
its chat. :func:`fused_search` with ``SEARCH_GATE`` is the same search for the history tool and MCP.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from psycopg_pool import AsyncConnectionPool

from core.context import Context
from core.contracts import Excerpt, ExcerptLine
from core.messages import adds_no_evidence, sent_at
from core.past_dates import question_range
from core.redaction import Redactor
from core.stopwords import ENGLISH as STOPWORDS
from core.statements import reported
from core.text_validation import made_storable
from core.tokens import count_tokens
from core.words import WORD_RUN
from embeddings.calibration import CALIBRATED
from knowledge.hybrid_ranking import reciprocal_rank_fusion, without_directions
from memory.user_memory import chat_titles
from prompts.excerpts import pack_excerpts, render_excerpt
from storage import episodes as table
from storage import forget_ledger
from storage.memory_store import memory_store

log = logging.getLogger(__name__)

EMBED_BATCH = 64
# Candidates per arm (full text, vectors) before fusion.
CANDIDATES = 40
# The assistant's words weigh this much of the user's in the fused ranking: evidence about the
# user is what they said (a reply that only repeated memory is not indexed at all).
ASSISTANT_WEIGHT = 0.95


def role_of(message: BaseMessage) -> str | None:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    return None  # tool results and system messages are plumbing, not conversation


def conversation(messages: Sequence[BaseMessage]) -> list[tuple[int, str, BaseMessage]]:
    """(position in the thread, role, message) of the messages the index keeps: user and
    assistant messages with text, less replies that only repeated memory (no evidence about the user)."""
    out = []
    for position, m in enumerate(messages):
        role = role_of(m)
        if role and m.id and m.text.strip() and not adds_no_evidence(m):
            out.append((position, role, m))
    return out


# --------------------------------------------------------------------------- writing
async def checkpoint_times(checkpointer, thread_id: str, wanted: Iterable[str]) -> dict[str, datetime]:
    """When each of ``wanted`` (message ids) first appeared in the thread's checkpoints: the time of
    messages written before messages carried their own. Walks the history back only as far as needed."""
    wanted = set(wanted)
    found: dict[str, datetime] = {}
    if not wanted or checkpointer is None:
        return found
    async for tup in checkpointer.alist({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}):
        ids = {m.id for m in (tup.checkpoint.get("channel_values", {}) or {}).get("messages") or [] if getattr(m, "id", None)}
        here = ids & wanted
        if not here:
            if found:
                break  # older checkpoints precede these messages (the list only grows back then)
            continue
        when = datetime.fromisoformat(tup.checkpoint["ts"])
        for message_id in here:
            found[message_id] = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return found


async def embed_texts(embeddings, texts: Sequence[str]) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        vectors.extend(await embeddings.aembed_documents(list(texts[start : start + EMBED_BATCH])))
    return vectors


@dataclass
class IndexResult:
    written: int = 0
    dropped: int = 0


async def index_thread(
    pool: AsyncConnectionPool,
    embeddings,
    owner: str,
    thread_id: str,
    messages: Sequence[BaseMessage],
    *,
    checkpointer=None,
    redactor: Redactor | None = None,
) -> IndexResult:
    """Bring the thread's rows in step with ``messages`` (the thread's current branch): add what
    is new, drop what left the branch, move what changed position. Only the new messages are embedded.
    A message is kept as the user's forgets leave it (``redactor``; read from the ledger when not
    given), so no write, sync or rebuild brings a forgotten word back into the index.

    The caller has checked that ``owner`` owns the thread (``thread_owners.claim``)."""
    if redactor is None:
        redactor = await forget_ledger.redactor(pool, owner)
    kept = conversation(messages)
    existing = await table.indexed_positions(pool, owner, thread_id)
    indexed_as = {m.id: made_storable(m.id) for _, _, m in kept}  # (as the index keeps an id: table.Episode)
    new = [(p, r, m) for p, r, m in kept if indexed_as[m.id] not in existing]
    moved = {m.id: p for p, _, m in kept if indexed_as[m.id] in existing and existing[indexed_as[m.id]] != p}
    keep_ids = [m.id for _, _, m in kept]
    if not new and not moved and len(existing) == len(keep_ids):
        return IndexResult()
    undated = [m.id for _, _, m in new if sent_at(m) is None]
    fallback = await checkpoint_times(checkpointer, thread_id, undated) if undated else {}
    now = datetime.now(timezone.utc)
    texts = [redactor.said(thread_id, m.id, m.text, reply=r != "user") for _, r, m in new]
    vectors = await embed_texts(embeddings, texts) if new else []
    rows = [
        table.Episode(thread_id, m.id, p, r, sent_at(m) or fallback.get(m.id) or now, text, owner=owner, embedding=v)
        for (p, r, m), text, v in zip(new, texts, vectors)
    ]
    dropped = await table.sync_thread(pool, owner, thread_id, keep=keep_ids, write=rows, moved=moved)
    return IndexResult(written=len(rows), dropped=dropped)


async def index_for_run(
    store, owner: str, thread_id: str, messages: Sequence[BaseMessage], checkpointer=None, redactor: Redactor | None = None
) -> IndexResult | None:
    """The index_messages node's call: our store gives the pool and the embeddings."""
    ours = memory_store(store)
    return await index_thread(ours.pool, ours.embeddings, owner, thread_id, messages, checkpointer=checkpointer, redactor=redactor)


async def rebuild(pool: AsyncConnectionPool, embeddings, checkpointer, owners_threads: Iterable[tuple[str, str]]) -> int:
    """Index every (owner, thread) from its latest checkpoint, as if new; returns rows written."""
    written = 0
    for owner, thread_id in owners_threads:
        await table.delete_thread(pool, owner, thread_id)
        tup = await checkpointer.aget_tuple({"configurable": {"thread_id": thread_id}})
        if tup is None:
            continue
        messages = (tup.checkpoint.get("channel_values", {}) or {}).get("messages") or []
        written += (await index_thread(pool, embeddings, owner, thread_id, messages, checkpointer=checkpointer)).written
    return written


# --------------------------------------------------------------------------- search
@dataclass(frozen=True)
class EpisodeGate:
    """Which found messages are related to the query at all (none of an unrelated lot reaches the prompt).

    A message passes when its cosine similarity to the query is at least ``min_similarity``, or
    it holds at least ``min_coverage`` of the query's words (each weighed by its rarity among the
    user's messages) and its similarity is at least ``min_similarity_covered``. Calibrated on
    all-MiniLM-L6-v2 (docs/episodic-memory.md: LoCoMo questions against the retrieval eval's
    unrelated messages); another embedding model needs its own floors.
    """

    min_similarity: float = CALIBRATED.episode_min_similarity
    min_similarity_covered: float = CALIBRATED.episode_min_similarity_covered
    min_coverage: float = 0.5
    # Once one message clears the gate the question is about the past: the others then need only
    # this much (similarity, or share of the question's weighted words) to fill the budget.
    floor_similarity: float = CALIBRATED.episode_floor_similarity
    floor_coverage: float = 0.25
    # A question naming a span of time that no message clears the gate for: a message said in the
    # span this similar admits it (what was said then is what it asks about).
    min_similarity_in_span: float = CALIBRATED.episode_min_similarity_in_span

    def admits(self, c: table.Candidate) -> bool:
        similarity = c.similarity if c.similarity is not None else 0.0
        return similarity >= self.min_similarity or (c.coverage >= self.min_coverage and similarity >= self.min_similarity_covered)

    def clears_floor(self, c: table.Candidate) -> bool:
        return (c.similarity or 0.0) >= self.floor_similarity or c.coverage >= self.floor_coverage

    def admits_in_span(self, c: table.Candidate) -> bool:
        """A message said in the span a question names admits it at this similarity."""
        return (c.similarity or 0.0) >= self.min_similarity_in_span


EPISODE_GATE = EpisodeGate()
# A search the user (or the model) asks for: any message holding a word of the query counts, a
# message found by meaning alone must be as close as the prompt's gate asks.
SEARCH_GATE = EpisodeGate(min_similarity_covered=-1.0, min_coverage=1e-9)


# Greetings, thanks and goodbyes resemble the same small talk in every past chat, and recalling
# it helps nothing: a message this close to one of these gets no excerpts.
SMALL_TALK = (
    "Hello, how are you?",
    "Hey! How's it going?",
    "Thank you so much, that was helpful.",
    "Thanks!",
    "Good morning!",
    "Good night, talk to you tomorrow.",
    "OK, sounds good.",
    "Bye, see you later!",
    "Great, let's do that.",
    "lol that's funny",
)
SMALL_TALK_SIMILARITY = CALIBRATED.small_talk
_small_talk_vectors: dict[int, Any] = {}


async def is_small_talk(embeddings, vector: Sequence[float]) -> bool:
    import numpy as np

    key = id(embeddings)
    if key not in _small_talk_vectors:
        rows = np.asarray(await embeddings.aembed_documents(list(SMALL_TALK)), dtype=np.float64)
        _small_talk_vectors[key] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    q = np.asarray(vector, dtype=np.float64)
    norm = np.linalg.norm(q)
    return bool(norm) and float((_small_talk_vectors[key] @ (q / norm)).max()) >= SMALL_TALK_SIMILARITY


@dataclass
class Found:
    """A candidate in fused order with its fused score."""

    candidate: table.Candidate
    score: float


# A word of the question held by at least this share of the owner's messages (a speaker's name
# before every turn of an imported transcript: "What did Caroline research?") says nothing about
# which message answers, yet it dominates a short question's vector, which then finds the turns
# where the name weighs most ("Caroline: Thanks!"). The vector arm ranks by the question's vector
# without that word's direction; the gate still judges the similarity to the question itself.
# (On the seven, settings chosen on the tuning split: see docs/episodic-memory.md. None: off.)
COMMON_WORD_SHARE: float | None = 0.1
# ... and by at least this many of them: among a new user's first messages a share is chance.
COMMON_WORD_MIN_MESSAGES = 20


async def fused_search(
    pool: AsyncConnectionPool, embeddings, owner: str, query: str, *,
    since: datetime | None = None, until: datetime | None = None, thread_id: str | None = None, exclude: Sequence[str] = (),
    candidates: int | None = None, gate: EpisodeGate | None = EPISODE_GATE,
    vector: Sequence[float] | Awaitable[Sequence[float]] | None = None,
) -> list[Found]:
    """The owner's messages matching ``query``, full text and vectors fused (RRF), best first;
    with a ``gate``, only those it admits. Without a ``vector`` (or its awaitable) the query is
    embedded here, while its words are searched."""
    if not query.strip():
        return []
    candidates = candidates or CANDIDATES
    vector = vector if vector is not None else embeddings.aembed_query(query)

    async def without(v: Sequence[float], words: list[str]) -> Sequence[float]:
        try:
            return without_directions(v, await embeddings.aembed_documents(words))
        except Exception:  # a refinement: when it fails, the question's own vector still ranks
            log.warning("The question's vector was searched with its common words %s: taking them out failed", words, exc_info=True)
            return v

    found = await table.search(
        pool, owner, query, vector, k=candidates, since=since, until=until, thread_id=thread_id, exclude=exclude,
        common_share=COMMON_WORD_SHARE, common_min=COMMON_WORD_MIN_MESSAGES, without_words=without if COMMON_WORD_SHARE else None,
    )
    by_key = {(c.thread_id, c.message_id): c for c in found}
    text_order = sorted((c for c in found if c.text_rank is not None), key=lambda c: c.text_rank)
    vector_order = sorted((c for c in found if c.vector_rank is not None), key=lambda c: c.vector_rank)
    fused = reciprocal_rank_fusion(
        [[(c.thread_id, c.message_id) for c in text_order], [(c.thread_id, c.message_id) for c in vector_order]]
    )
    # What the user said outranks what the assistant said at the same fused rank.
    out = sorted((Found(by_key[key], score * (1.0 if by_key[key].role == "user" else ASSISTANT_WEIGHT)) for key, score in fused),
                 key=lambda f: -f.score)
    if gate is not None:
        out = [f for f in out if gate.admits(f.candidate)]
    return out


# A turn this short (in words) says little alone ("yes, in March"): the turn before it goes with it.
# (6 did better than 12 or 20 on LoCoMo at the same budget: longer turns mostly stand alone.)
SHORT_TURN_WORDS = 6
NEIGHBOURS_ALWAYS = False
_WORDS = WORD_RUN  # core.words: every splitter lives there


def needs_previous(c: table.Candidate) -> bool:
    return len(_WORDS.findall(c.content)) < SHORT_TURN_WORDS


def needs_next(c: table.Candidate) -> bool:
    # A question's answer is the turn after it.
    return c.content.rstrip().endswith("?")


async def _titles(store, owner: str, thread_ids: Iterable[str]) -> dict[str, str]:
    ids = list(dict.fromkeys(thread_ids))
    if store is None or not ids:
        return {}
    return await chat_titles(store, owner, ids)


def _span_search(
    pool: AsyncConnectionPool,
    embeddings,
    owner: str,
    query: str,
    span: tuple[datetime, datetime],
    *,
    vector: Awaitable[Sequence[float]],
    thread_id: str | None,
    exclude: Sequence[str],
) -> _Later:
    """The search of what was said in ``span`` (its messages best first, ungated), started when
    first awaited."""

    async def search() -> list[Found]:
        return await fused_search(
            pool, embeddings, owner, query, since=span[0], until=span[1], thread_id=thread_id, exclude=exclude, gate=None, vector=await vector
        )

    return _Later(search)


def _fused_with(found: list[Found], more: list[Found], weight: float, gate: EpisodeGate | None) -> list[Found]:
    """``found`` fused with a second search's ``more`` (what the gate lets through), which counts ``weight``."""
    if gate is not None:
        more = [f for f in more if gate.admits(f.candidate) or gate.clears_floor(f.candidate)]
    by_key = {(f.candidate.thread_id, f.candidate.message_id): f.candidate for f in [*found, *more]}
    keys = lambda items: [(f.candidate.thread_id, f.candidate.message_id) for f in items]  # noqa: E731
    fused = reciprocal_rank_fusion([keys(found), keys(more)], weights=[1.0, weight])
    return [Found(by_key[k], score) for k, score in fused]


# Excerpt compression: a message longer than this many words shows only its sentences that share a
# word with the question (and the first), so more evidence fits the budget. 0: off.
COMPRESS_OVER_WORDS = 0
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _stems(text: str) -> set[str]:
    return {w[:5] for w in _WORDS.findall(text.casefold()) if w not in STOPWORDS and len(w) > 2}


def compress(text: str, query: str) -> str:
    """``text`` with only the sentences that bear on ``query`` (a shared word), the first kept for
    its context; a short text, or one with no such sentence (found by meaning), as it is."""
    if not COMPRESS_OVER_WORDS or len(_WORDS.findall(text)) <= COMPRESS_OVER_WORDS:
        return text
    wanted = _stems(query)
    sentences = _SENTENCE.split(text.strip())
    keep = [i for i, s in enumerate(sentences) if _stems(s) & wanted]
    if not keep:
        return text
    keep = sorted({0, *keep})
    out: list[str] = []
    prev = 0
    for i in keep:
        if out and i != prev + 1:
            out.append("…")
        out.append(sentences[i])
        prev = i
    return " ".join(out)


# Multi-hop: a second search from the names the first excerpts bring (capitalised words the
# question does not hold), fused after the first with this weight. 0: off.
SECOND_HOP_WEIGHT = 0.0
SECOND_HOP_FROM = 3
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


async def _second_hop(pool, embeddings, owner: str, query: str, found: list[Found], *, thread_id, exclude, gate) -> list[Found]:
    if not SECOND_HOP_WEIGHT or not found:
        return found
    asked = set(_WORDS.findall(query.casefold()))
    names: list[str] = []
    for f in found[:SECOND_HOP_FROM]:
        for name in _NAME.findall(f.candidate.content):
            if name.casefold() not in asked and name.casefold() not in STOPWORDS and name not in names:
                names.append(name)
    if not names:
        return found
    hop = await fused_search(pool, embeddings, owner, f"{query} {' '.join(names[:6])}", thread_id=thread_id, exclude=exclude, gate=None)
    return _fused_with(found, hop, SECOND_HOP_WEIGHT, gate)


# Whether a question naming a span of time searches it too, and how many times its list counts in the fusion.
TIME_AWARE = True
TIME_SPAN_WEIGHT = 1.0


def _piece(c: table.Candidate, score: float, title: str, lines: Sequence[table.Said]) -> Excerpt:
    return Excerpt(
        thread_id=c.thread_id,
        chat_title=title,
        score=round(score, 5),
        lines=[ExcerptLine(message_id=l.message_id, position=l.position, role=l.role, sent_at=l.sent_at.isoformat(), text=l.content) for l in lines],
    )


class _Later:
    """An awaitable that starts its work when first awaited, then gives every await the same
    result (a task started up front runs even when nothing will need it)."""

    def __init__(self, make: Callable[[], Awaitable[Any]]) -> None:
        self._make = make
        self._task: asyncio.Future | None = None

    def __await__(self):
        if self._task is None:
            self._task = asyncio.ensure_future(self._make())
        return self._task.__await__()


async def recall_ranked(
    pool: AsyncConnectionPool,
    embeddings,
    owner: str,
    query: str,
    *,
    store=None,
    thread_id: str | None = None,
    exclude: Sequence[str] = (),
    token_cap: int = Context.episodic_token_budget,
    gate: EpisodeGate | None = EPISODE_GATE,
    now: datetime | None = None,
) -> list[Excerpt]:
    """What was said that bears on ``query``, best first, for the reply prompt to pack
    (``prompts.excerpts.pack_excerpts``): each a message found with the neighbouring turns it
    needs (``core.contracts.Excerpt``, the found message's line first). Enough of them to fill ``token_cap`` (their rendered costs
    add up past it); no budget is applied here. Messages of ``thread_id`` listed in ``exclude``
    (the model already sees them) are left out. Empty when nothing clears the gate."""
    if token_cap <= 0 or not query.strip():
        return []
    asked = query
    if gate is EPISODE_GATE and (about := reported(query)):
        # "When did I say I was moving?" asks for a search of what was said: what it names is
        # searched, and a message holding one of its words counts, as in a search the user asks for.
        query, gate = about, SEARCH_GATE
    # The message's words are searched while it is embedded (the first step of a turn's critical
    # path), once the search knows the owner has said anything: a new user's first turn embeds nothing.
    vector = _Later(lambda: embeddings.aembed_query(query))
    found = await fused_search(pool, embeddings, owner, query, thread_id=thread_id, exclude=exclude, gate=None, vector=vector)
    if not found:
        return []
    if gate is not None and await is_small_talk(embeddings, await vector):
        return []
    # A question about a span of time ("in May", "last spring", "on 7 July": core.past_dates) also
    # searches that span, and what was said in it is ranked up.
    span = question_range(asked, now) if TIME_AWARE and now is not None else None
    in_span = _span_search(pool, embeddings, owner, asked, span, vector=vector, thread_id=thread_id, exclude=exclude) if span else None
    if gate is not None:
        # A question naming a span that is past ("Where was I between August 11 and 15?") asks what
        # was said then, though no message may be like it: one said in the span that is near enough
        # admits it. ("Any good films this month?" names no past span.)
        past = in_span is not None and span[1] <= now
        if not any(gate.admits(f.candidate) for f in found) and not (past and any(gate.admits_in_span(f.candidate) for f in await in_span)):
            return []
        found = [f for f in found if gate.admits(f.candidate) or gate.clears_floor(f.candidate)]
    if in_span is not None:
        # What was said in the span is ranked up: fused again with the search of every time.
        found = _fused_with(found, await in_span, TIME_SPAN_WEIGHT, gate)
    found = await _second_hop(pool, embeddings, owner, query, found, thread_id=thread_id, exclude=exclude, gate=gate)
    hidden = set(exclude) if thread_id else set()
    titles = await _titles(store, owner, (f.candidate.thread_id for f in found))
    pieces: list[Excerpt] = []
    cost = 0
    for f in found:
        c = f.candidate
        lines: list[table.Said] = [c]
        for n in (c.before, c.after):
            if n is None or (n.thread_id == thread_id and n.message_id in hidden):
                continue
            if NEIGHBOURS_ALWAYS or (n.position < c.position and needs_previous(c)) or (n.position > c.position and needs_next(c)):
                lines.append(n)
        piece = _piece(c, f.score, titles.get(c.thread_id, ""), lines)
        if COMPRESS_OVER_WORDS:
            for line in piece["lines"]:
                line["text"] = compress(line["text"], query)
        pieces.append(piece)
        cost += count_tokens(render_excerpt(piece))
        if cost > token_cap:
            break  # packing merges and dedupes: these already fill any budget up to the cap
    return pieces


async def recall(
    pool: AsyncConnectionPool, embeddings, owner: str, query: str, *, token_budget: int = Context.episodic_token_budget, **options: Any
) -> list[Excerpt]:
    """:func:`recall_ranked` (``options`` are its own: ``store``, ``thread_id``, ``exclude``, ``gate``,
    ``now``) packed into ``token_budget`` as the prompt renders them, oldest first (the history
    tool's and tests' view; the reply prompt packs into what its other sections leave)."""
    ranked = await recall_ranked(pool, embeddings, owner, query, token_cap=token_budget, **options)
    return pack_excerpts(ranked, token_budget)
