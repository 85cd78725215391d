"""The knowledge base: documents loaded, chunked, embedded into Postgres, and searched (hybrid)."""
