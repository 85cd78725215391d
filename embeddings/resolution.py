"""Which embeddings the agent uses: a spec such as ``local:all-MiniLM-L6-v2`` (the default, the
numpy encoder), ``hash:<dims>`` (a toy for tests) or any ``init_embeddings`` string, resolved into
an :class:`EmbeddingsInfo` the store and the knowledge base are built with."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
from langchain_core.embeddings import Embeddings

from core.words import word_runs
from embeddings.encoder import MiniLMEmbeddings
from core.errors import SettingError
from embeddings.weights import EmbeddingModelUnavailable, resolve_minilm_dir

DEFAULT_EMBEDDINGS_SPEC = "local:all-MiniLM-L6-v2"
ENV_EMBEDDINGS = "MEMORY_AGENT_EMBEDDINGS"
ENV_EMBEDDINGS_DIMS = "MEMORY_AGENT_EMBEDDINGS_DIMS"

_LOCAL_ALIASES = frozenset(
    {
        "local:all-minilm-l6-v2",
        "all-minilm-l6-v2",
        "sentence-transformers/all-minilm-l6-v2",
        "local:sentence-transformers/all-minilm-l6-v2",
    }
)
# Dimensions of well-known API models, so resolving them needs no network round trip.
_KNOWN_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_OPENAI_PROVIDERS = frozenset({"openai", "azure_openai"})


@dataclass(frozen=True)
class EmbeddingsInfo:
    """A ready embeddings object plus what the vector store must know about it.

    ``name`` is a canonical spec (feeding it back to ``resolve_embeddings`` gives the
    same model); store it next to the vectors to detect a model change.
    """

    embeddings: Embeddings
    name: str
    dims: int



class HashEmbeddings(Embeddings):
    """Deterministic signed feature hashing -- FOR TESTS AND DEMOS ONLY, not semantic.

    Lower-cased word unigrams and bigrams are hashed (blake2b, so stable across
    processes, unlike ``hash()``) into ``dims`` buckets with a +-1 sign, then the vector
    is L2-normalised. Texts sharing words get a positive cosine, nothing more. It exists
    to make unit tests fast and to demonstrate a dims mismatch (``hash:16`` vs a 384-d
    store). Text with no word characters maps to the unit vector e0.
    """

    def __init__(self, dims: int) -> None:
        if dims < 1:
            raise ValueError("dims must be >= 1")
        self.dims = dims
        self.model_name = f"hash:{dims}"

    def _embed(self, text: str) -> list[float]:
        words = word_runs(text.lower())
        features = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
        vec = np.zeros(self.dims, dtype=np.float64)
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            vec[h % self.dims] += 1.0 if h >> 63 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:  # no words, or features cancelled out: avoid a zero vector (NaN cosine)
            vec[0], norm = 1.0, 1.0
        return (vec / norm).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)  # microseconds of work: no thread hop

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def _parse_dims(value: str, source: str) -> int:
    try:
        dims = int(value.strip())
    except ValueError:
        dims = 0
    if dims < 1:
        raise SettingError(f"{source}: expected a positive integer, got {value!r}")
    return dims


def resolve_embeddings(spec: str | None = None) -> EmbeddingsInfo:
    """Build the embeddings named by ``spec`` (default: ``$MEMORY_AGENT_EMBEDDINGS`` or
    ``local:all-MiniLM-L6-v2``).

    - ``local:all-MiniLM-L6-v2`` (also ``all-MiniLM-L6-v2``,
      ``sentence-transformers/all-MiniLM-L6-v2``): ``MiniLMEmbeddings``, 384 dims. The
      weight directory is located now (so a missing model fails at startup), the
      weights themselves load on first use.
    - ``hash:<dims>``: ``HashEmbeddings`` (tests only).
    - anything else, e.g. ``openai:text-embedding-3-small``: ``init_embeddings(spec)``;
      dims from ``$MEMORY_AGENT_EMBEDDINGS_DIMS``, a table of known models, or one probe call.
    """
    spec = (spec or os.environ.get(ENV_EMBEDDINGS) or DEFAULT_EMBEDDINGS_SPEC).strip()

    if spec.lower() in _LOCAL_ALIASES:
        embeddings = MiniLMEmbeddings(resolve_minilm_dir())
        return EmbeddingsInfo(embeddings, DEFAULT_EMBEDDINGS_SPEC, MiniLMEmbeddings.dims)

    if spec.lower().startswith("hash:"):
        dims = _parse_dims(spec.split(":", 1)[1], f"embeddings spec {spec!r}")
        return EmbeddingsInfo(HashEmbeddings(dims), f"hash:{dims}", dims)

    try:
        from langchain.embeddings import init_embeddings
    except ImportError as exc:
        raise EmbeddingModelUnavailable(
            f"embeddings spec {spec!r} needs the `langchain` package (pip install langchain)"
        ) from exc
    try:
        embeddings = init_embeddings(spec)
    except Exception as exc:
        raise EmbeddingModelUnavailable(
            f"could not initialise embeddings {spec!r}: {type(exc).__name__}: {exc}"
        ) from exc

    if env_dims := os.environ.get(ENV_EMBEDDINGS_DIMS):
        dims = _parse_dims(env_dims, ENV_EMBEDDINGS_DIMS)
    else:
        provider, _, model = spec.partition(":")
        known = _KNOWN_DIMS.get(model) if provider.lower() in _OPENAI_PROVIDERS else None
        if known is not None:
            dims = known
        else:
            try:
                dims = len(embeddings.embed_query("dimension probe"))
            except Exception as exc:
                raise EmbeddingModelUnavailable(
                    f"could not learn the dimension of {spec!r} by embedding a probe "
                    f"({type(exc).__name__}: {exc}); set {ENV_EMBEDDINGS_DIMS} to skip the probe"
                ) from exc
    return EmbeddingsInfo(embeddings, spec, dims)
