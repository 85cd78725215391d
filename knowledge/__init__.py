"""The knowledge base: documents loaded, chunked, embedded into Postgres, and searched (hybrid)."""

from knowledge.ingestion import FileOutcome, IngestReport, ingest, reembed, remove
from knowledge.retrieval import RetrievedChunk, search
from knowledge.schema import DEFAULT_COLLECTION, KnowledgeDocument, is_empty, list_documents, setup, stats

__all__ = [
    "DEFAULT_COLLECTION",
    "FileOutcome",
    "IngestReport",
    "KnowledgeDocument",
    "RetrievedChunk",
    "ingest",
    "is_empty",
    "list_documents",
    "reembed",
    "remove",
    "search",
    "setup",
    "stats",
]
