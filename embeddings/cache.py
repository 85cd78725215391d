"""A small LRU cache in front of the embeddings.

One turn embeds the same text several times: the store embeds the query once per
namespace it searches (facts, tasks, chats) and the knowledge base embeds it again.
Caching by exact text makes that one model call. Calls running at the same time (load_context
recalls facts and past messages concurrently, both for the message's text) share one computation
rather than both missing the cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from langchain_core.embeddings import Embeddings

from embeddings.batching import background_now

DEFAULT_SIZE = 2048


class CachedEmbeddings(Embeddings):
    def __init__(self, inner: Embeddings, max_items: int = DEFAULT_SIZE) -> None:
        self.inner = inner
        self.max_items = max_items
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()
        # Texts being embedded right now, by event loop: a concurrent caller awaits the same result.
        self._pending: dict[tuple[tuple[int, bool], str], asyncio.Future] = {}
        self.hits = 0
        self.misses = 0

    def __getattr__(self, name: str):  # model_name, dims, … of the wrapped model
        return getattr(self.inner, name)

    def _lookup(self, texts: list[str]) -> tuple[list[list[float] | None], list[str]]:
        with self._lock:
            found: list[list[float] | None] = []
            for t in texts:
                vec = self._cache.get(t)
                if vec is not None:
                    self._cache.move_to_end(t)
                    self.hits += 1
                else:
                    self.misses += 1
                found.append(vec)
        missing = list(dict.fromkeys(t for t, v in zip(texts, found) if v is None))
        return found, missing

    def _remember(self, texts: list[str], vectors: list[list[float]]) -> None:
        with self._lock:
            for t, v in zip(texts, vectors):
                self._cache[t] = list(v)
                self._cache.move_to_end(t)
            while len(self._cache) > self.max_items:
                self._cache.popitem(last=False)

    def _assemble(self, texts: list[str], found, missing: list[str], vectors) -> list[list[float]]:
        fresh = dict(zip(missing, vectors))
        return [v if v is not None else fresh[t] for t, v in zip(texts, found)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        found, missing = self._lookup(texts)
        vectors = self.inner.embed_documents(missing) if missing else []
        self._remember(missing, vectors)
        return self._assemble(texts, found, missing, vectors)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        found, missing = self._lookup(texts)
        if not missing:
            return self._assemble(texts, found, [], [])
        loop = asyncio.get_running_loop()
        # Per lane: a reply's query must not wait on the same text being embedded in the background.
        key = (id(loop), background_now())
        waiting = {t: self._pending[(key, t)] for t in missing if (key, t) in self._pending}
        mine = [t for t in missing if t not in waiting]
        futures = {t: loop.create_future() for t in mine}
        self._pending.update({(key, t): f for t, f in futures.items()})
        vectors: list[list[float]] = []
        try:
            if mine:
                vectors = await self.inner.aembed_documents(mine)
                self._remember(mine, vectors)
        finally:
            done = dict(zip(mine, vectors))
            for t, f in futures.items():
                self._pending.pop((key, t), None)
                if not f.done():
                    f.set_result(done.get(t))  # None: it failed here, a waiter embeds it itself
        fresh = done
        for t, f in waiting.items():
            # Shielded: a waiter that is cancelled (its import stopped) must not cancel the shared
            # future, which would fail the caller that embeds it (another user's turn or import).
            vector = await asyncio.shield(f)
            fresh[t] = vector if vector is not None else (await self.inner.aembed_documents([t]))[0]
        return self._assemble(texts, found, list(fresh), [fresh[t] for t in fresh])

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]
