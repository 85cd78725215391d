"""`memory-agent doctor`: what this installation uses and whether it works."""

from __future__ import annotations

import os
import sys

from llm.chat_model import load_chat_model, model_label, resolve_model_name
import knowledge
from memory.backend import MemoryBackend
from memory.queries import installation_counts
from storage.postgres import data_dir, describe_location


async def doctor_report(backend: MemoryBackend, *, startup_seconds: float) -> str:
    model_name = resolve_model_name(None)
    model = load_chat_model(model_name)
    kb = await knowledge.stats(backend.pool)
    counts = await installation_counts(backend.store)
    lines = [
        "memory-agent doctor",
        f"  python         {sys.version.split()[0]}",
        f"  database       {backend.info.server_version}, pgvector {backend.info.pgvector_version} (ok)",
        f"  data lives in  {describe_location(backend.url)}",
        f"  data dir       {data_dir()}" if not os.environ.get("DATABASE_URL") else "  data dir       (not used: DATABASE_URL is set)",
        f"  database size  {counts.size}; {counts.threads} chat threads; {counts.items} memory items",
        f"  knowledge base {kb['documents']} documents, {kb['chunks']} chunks"
        + (" (" + ", ".join(f"{name}: {c['documents']}/{c['chunks']}" for name, c in kb["collections"].items()) + ")" if kb["collections"] else ""),
        f"  model          {model_name} ({model_label(model)})" + ("  ← offline: not an LLM" if model_name == "offline" else ""),
        f"  embeddings     {backend.embeddings.name}, {backend.embeddings.dims} dims (recorded: {counts.embeddings.get('model')}, {counts.embeddings.get('dims')})",
        f"  startup        {startup_seconds:.2f}s",
    ]
    return "\n".join(lines)
