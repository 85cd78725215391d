"""A vector as pgvector's text literal: how every statement here sends one.

Writing 384 floats out costs ~0.27 ms (the floats' reprs), and one turn sends the message's
vector several times: load_context's three searches (facts, chats, what was said) and the
memory phase's write of the message to the index of what was said. So the last few vectors'
literals are kept, keyed by their values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache


def vector_literal(vector: Sequence[float]) -> str:
    """``[0.1,0.2,…]`` with every digit of each value (Postgres sees the caller's vector exactly).
    Raises ValueError for an empty vector or one with a NaN or an infinite value."""
    values = tuple(float(x) for x in vector)
    if not values:
        raise ValueError("the vector is empty")
    if not all(math.isfinite(x) for x in values):
        raise ValueError("the vector has a NaN or infinite value")
    return _literal(values)


@lru_cache(maxsize=32)
def _literal(values: tuple[float, ...]) -> str:
    return "[" + ",".join(repr(x) for x in values) + "]"
