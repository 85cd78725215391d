"""The numpy MiniLM must reproduce real sentence-transformers output.

``tests/fixtures/minilm_reference.json`` was produced by sentence-transformers + torch
(see ``tests/fixtures/make_minilm_reference.py``) from the same weight files. Its
sentences cover empty and one-letter inputs, Hebrew, Italian, accents, CJK + emoji,
code, numbers, punctuation, surrounding whitespace and a 387-word-piece text that only
matches if truncation happens at 256 word pieces like sentence-transformers does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embeddings import MiniLMEmbeddings, resolve_minilm_dir

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "minilm_reference.json"
_REF = json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def numpy_vectors() -> np.ndarray:
    model = MiniLMEmbeddings(resolve_minilm_dir(allow_download=False))
    return np.asarray(model.embed_documents(_REF["sentences"]))


def test_reference_fixture_is_well_formed() -> None:
    assert _REF["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert len(_REF["sentences"]) == len(_REF["vectors"]) >= 12
    assert all(len(v) == 384 for v in _REF["vectors"])
    assert _REF["long_sentence_wordpieces_untruncated"] > 256


@pytest.mark.parametrize("index", range(len(_REF["sentences"])), ids=lambda i: f"s{i}")
def test_numpy_minilm_matches_sentence_transformers_reference(
    numpy_vectors: np.ndarray, index: int
) -> None:
    ours = numpy_vectors[index]
    ref = np.asarray(_REF["vectors"][index])
    cosine = float(ours @ ref / (np.linalg.norm(ours) * np.linalg.norm(ref)))
    assert cosine >= 0.999, f"{_REF['sentences'][index][:60]!r}: cosine {cosine:.6f}"
    # Cosine alone is lenient: e.g. the tanh-approximate GELU still scores 0.99999 but is
    # off by ~4e-4 per component. We match to the fixture's 6-decimal rounding (~1e-6);
    # 5e-5 leaves room for BLAS differences across machines yet catches such divergences.
    assert np.abs(ours - ref).max() < 5e-5
