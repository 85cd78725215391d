"""The embeddings run BLAS on one thread unless the user chose a count (embeddings/encoder.py).

Each case runs in a fresh interpreter: the limit is process-wide, set when the model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# numpy first, as a served graph imports it (graph.assembly): an environment variable set when
# ``embeddings`` is imported is then read too late.
PROBE = """
import json
import numpy
from threadpoolctl import threadpool_info
from embeddings import MiniLMEmbeddings
MiniLMEmbeddings().embed_query("a query")
print(json.dumps([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]))
"""
SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads(**env: str) -> list[int]:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS} | env
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter each
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: BLAS has one thread anyway")
def test_embedding_a_query_leaves_blas_with_one_thread() -> None:
    assert blas_threads() == [1]


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no count above one to keep")
def test_a_thread_count_the_user_chose_is_kept() -> None:
    assert blas_threads(OPENBLAS_NUM_THREADS="2") == [2]
