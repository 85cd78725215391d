"""The shapes of what recall and retrieval hand the reply prompt, written once.

``State.loaded_context`` (:class:`LoadedContext`, with its :class:`Excerpt` list) and
``State.retrieved_chunks`` (:class:`Chunk`) are built by ``memory.recall``, ``memory.episodes``
and ``knowledge.retrieval`` and read by ``prompts.reply_prompt``, ``prompts.excerpts``, the nodes
and the evals. They are TypedDicts, not models, on purpose: they live in the checkpointed state,
and a TypedDict is a plain dict at run time, so checkpoints keep serializing as JSON-friendly
dicts (readable in Studio and psql, no type allow-list), exactly as before they were typed.

``typing_extensions.TypedDict``, because pydantic (LangGraph's state schemas, the server's
JSON schema) accepts only that one before Python 3.12.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, computed_field
from typing_extensions import TypedDict

__all__ = ["Chunk", "Excerpt", "ExcerptLine", "LoadedContext", "RankedFact", "RelatedChat", "RetrievedChunk", "TaskLine"]


class RankedFact(TypedDict):
    """A fact ranked for the message (``memory.recall.rank_facts``), best first."""

    id: str
    text: str
    importance: str
    similarity: float
    score: float


class TaskLine(TypedDict):
    """An open task shown with the message."""

    id: str
    description: str
    status: str
    due: str | None
    due_date: str | None


class RelatedChat(TypedDict):
    """Another chat of the user's that relates to the message."""

    thread_id: str
    title: str
    summary_snippet: str
    similarity: float


class ExcerptLine(TypedDict):
    """One message of an excerpt; ``sent_at`` is ISO 8601 (the state holds JSON-friendly values)."""

    message_id: str
    position: int
    role: str
    sent_at: str
    text: str


class Excerpt(TypedDict):
    """A piece of an earlier conversation (``memory.episodes.recall_ranked``; packed into the
    prompt's budget by ``prompts.excerpts.pack_excerpts``): the message found first, then the
    neighbouring turns it needs; after packing, a run of neighbouring messages of one chat."""

    thread_id: str
    chat_title: str
    score: float
    lines: list[ExcerptLine]


class LoadedContext(TypedDict, total=False):
    """What load_context found for the message (``State.loaded_context``).

    load_context always fills every key (``memory.recall.load_user_context`` all but
    ``excerpts``, which ``nodes.load_context`` adds); ``total=False`` because the state holds
    ``{}`` before the first turn and readers take a missing key as empty."""

    profile: dict[str, Any]
    """``core.schemas.UserProfile`` as JSON."""
    preferences: dict[str, Any]
    """``core.schemas.UserPreferences`` as JSON."""
    facts: list[RankedFact]
    tasks: list[TaskLine]
    related_chats: list[RelatedChat]
    excerpts: list[Excerpt]
    """Ranked, not packed: the reply prompt packs them into what its other sections leave."""


class RetrievedChunk(BaseModel):
    """One knowledge-base chunk ``knowledge.search`` found, with how it was found; the state keeps
    it as a :class:`Chunk`."""

    id: int
    source: str
    chunk_index: int
    heading_path: str
    content: str
    collection: str
    vector_rank: int | None = None
    """1-based rank among the vector candidates (None: not among them)."""
    text_rank: int | None = None
    """1-based rank among the full-text candidates (None: no full-text match)."""
    rrf_score: float
    vector_similarity: float | None = None
    """Cosine similarity between the query and the chunk."""
    text_match: bool = False
    """The chunk matches a word of the query that is not a stop word or filler."""
    text_coverage: float = 0.0
    """The share of the query's words (stop words and filler aside), each weighed by its rarity
    in the searched chunks (idf), that the chunk holds: 1.0 when it holds them all."""
    whole_match: bool = False
    """The query is a lookup (at most ``knowledge.retrieval.LOOKUP_MAX_WORDS`` words beyond stop words and filler) and the
    chunk holds every word of it."""
    tokens: int
    """Tokens of the chunk as the prompt renders it, separator included (what counts against the budget)."""
    metadata: dict[str, Any] = {}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def citation(self) -> str:
        return f"{self.source}#{self.chunk_index}"

    def as_chunk(self) -> Chunk:
        """What retrieve keeps in the state (``State.retrieved_chunks``): JSON, without the metadata."""
        return Chunk(**self.model_dump(mode="json", exclude={"metadata"}))


# The state's shape of a chunk, derived from the model above so its fields are written once: a
# TypedDict (a plain dict at run time, see the module's docstring) of the model's JSON fields
# without the metadata, plus the computed citation.
_CHUNK_FIELDS = {name: f.annotation for name, f in RetrievedChunk.model_fields.items() if name != "metadata"}
Chunk = TypedDict("Chunk", {**_CHUNK_FIELDS, "citation": str})  # type: ignore[misc]
Chunk.__doc__ = """A knowledge-base chunk retrieve chose (``RetrievedChunk.as_chunk``), most relevant first.

``tokens`` is its cost as the prompt renders it (``prompts.reply_prompt.chunk_cost``)."""
