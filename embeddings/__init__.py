"""Embeddings: the local MiniLM encoder (numpy), resolution of the configured model, caching,
and the record of which model built the stored vectors."""

import os

# Multi-threaded BLAS collapses when the CPU is shared with Postgres and other requests
# (see benchmarks/README.md); one thread per embedding call is faster under load.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from embeddings.encoder import MiniLMEmbeddings
from embeddings.resolution import DEFAULT_EMBEDDINGS_SPEC, EmbeddingsInfo, HashEmbeddings, resolve_embeddings
from embeddings.weights import EmbeddingModelUnavailable, resolve_minilm_dir

__all__ = [
    "DEFAULT_EMBEDDINGS_SPEC",
    "EmbeddingModelUnavailable",
    "EmbeddingsInfo",
    "HashEmbeddings",
    "MiniLMEmbeddings",
    "resolve_embeddings",
    "resolve_minilm_dir",
]
