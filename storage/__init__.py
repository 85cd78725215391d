"""Postgres plumbing below user memory: connections and the embedded server, run records,
the fenced checkpointer, API keys, per-user write locks, per-user vector search, bulk loads."""
