"""The knowledge base: documents loaded, chunked, embedded into Postgres, and searched (hybrid)."""

from knowledge.ingestion import FileOutcome, IngestReport, ingest, reembed, remove, remove_documents
from knowledge.hybrid_ranking import RELEVANCE_GATE, RelevanceGate
from knowledge.retrieval import RetrievedChunk, fused_candidates, search
from knowledge.schema import DEFAULT_COLLECTION, KnowledgeDocument, is_empty, list_documents, list_sections, setup, stats

__all__ = [
    "DEFAULT_COLLECTION",
    "FileOutcome",
    "IngestReport",
    "KnowledgeDocument",
    "RELEVANCE_GATE",
    "RelevanceGate",
    "RetrievedChunk",
    "fused_candidates",
    "ingest",
    "is_empty",
    "list_documents",
    "list_sections",
    "reembed",
    "remove",
    "remove_documents",
    "search",
    "setup",
    "stats",
]
