"""Embeddings: the local MiniLM encoder (numpy), resolution of the configured model, caching,
and the record of which model built the stored vectors."""

# BLAS runs on one thread (set when the model loads: embeddings.encoder._one_blas_thread).
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
