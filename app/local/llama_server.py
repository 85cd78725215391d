"""``python -m app.local.llama_server``: llama-cpp-python's server, with a prompt cache that counts
what it holds.

llama-cpp-python's RAM cache (``--cache``) bounds only the KV bytes of the states it keeps, but each
state also keeps a copy of the logits (up to n_batch x vocabulary floats: ~310 MB on Qwen2.5), so
many short prompts (titles, folds) pile up uncounted: a 0.5B server with a 128 MiB cache was seen at
9.8 GB. Here a state's size is every array it keeps, so ``--cache_size`` bounds the RAM the cache
really takes. Everything else is the library's own server.
"""

from __future__ import annotations

import llama_cpp
from llama_cpp.llama_cache import LlamaRAMCache


def state_bytes(state) -> int:
    """What one saved state holds in RAM: the KV state, the logits copy and the token ids."""
    return int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)


class BoundedRAMCache(LlamaRAMCache):
    """The library's LRU RAM cache, its size counted in real bytes (it evicts the oldest past capacity)."""

    @property
    def cache_size(self) -> int:
        return sum(state_bytes(s) for s in self.cache_state.values())


def main() -> None:
    llama_cpp.LlamaRAMCache = BoundedRAMCache  # the server builds its cache by this name (llama_cpp/server/model.py)
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
