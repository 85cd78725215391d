"""A vector goes to Postgres as pgvector's text literal, exactly, whichever statement sends it
(storage/vector_literal.py); the same vector sent again in a turn is not written out again."""

from __future__ import annotations

import math

import numpy as np
import pytest

from storage import vector_literal as literal_module
from storage.vector_literal import vector_literal


def test_every_digit_of_each_value_reaches_the_literal():
    vector = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    text = vector_literal(vector)
    assert text.startswith("[") and text.endswith("]")
    assert [float(x) for x in text[1:-1].split(",")] == [float(x) for x in vector]


@pytest.mark.parametrize("vector", [[], [0.1, math.nan], [math.inf, 0.2], np.array([0.5, -math.inf])])
def test_an_empty_or_non_finite_vector_is_refused(vector):
    with pytest.raises(ValueError, match="empty|NaN or infinite"):
        vector_literal(vector)


def test_the_same_values_are_written_out_once_whatever_container_holds_them():
    vector = [0.25, -0.5, 0.125 + 1e-9]
    literal_module._literal.cache_clear()
    first = vector_literal(vector)
    again = [vector_literal(list(vector)), vector_literal(tuple(vector)), vector_literal(np.array(vector))]
    assert again == [first] * 3
    info = literal_module._literal.cache_info()
    assert (info.misses, info.hits) == (1, 3)
