"""Embeddings: the local MiniLM encoder (numpy), resolution of the configured model, caching,
and the record of which model built the stored vectors."""

import os

# Multi-threaded BLAS collapses when the CPU is shared with Postgres and other requests
# (see benchmarks/README.md); one thread per embedding call is faster under load.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
