"""The embeddings cache: one model call per text, also when callers ask at the same time."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.embeddings import Embeddings

from embeddings.batching import background_now, in_background
from embeddings.cache import CachedEmbeddings


class CountingEmbeddings(Embeddings):
    """Slow enough that two concurrent callers overlap; counts the texts it is asked to embed."""

    def __init__(self, fail: bool = False) -> None:
        self.asked: list[str] = []
        self.fail = fail

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t)), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.asked.extend(texts)
        await asyncio.sleep(0.05)
        if self.fail:
            raise RuntimeError("model down")
        return self.embed_documents(texts)


async def test_concurrent_queries_for_the_same_text_share_one_model_call():
    inner = CountingEmbeddings()
    cache = CachedEmbeddings(inner)
    a, b, c = await asyncio.gather(cache.aembed_query("renew my passport"), cache.aembed_query("renew my passport"),
                                   cache.aembed_documents(["renew my passport", "Rome"]))  # fmt: skip
    assert a == b == c[0] == [17.0, 1.0] and c[1] == [4.0, 1.0]
    assert sorted(inner.asked) == ["Rome", "renew my passport"]  # each text embedded once
    assert await cache.aembed_query("renew my passport") == a and len(inner.asked) == 2  # later: from the cache


async def test_a_failed_embedding_fails_its_caller_and_a_concurrent_one_tries_again_itself():
    inner = CountingEmbeddings(fail=True)
    cache = CachedEmbeddings(inner)
    results = await asyncio.gather(cache.aembed_query("x"), cache.aembed_query("x"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert not cache._pending  # nothing left waiting
    inner.fail = False
    assert await cache.aembed_query("x") == [1.0, 1.0]


async def test_a_cancelled_waiter_does_not_fail_the_caller_embedding_the_same_text():
    # Four users importing the same history share texts; when one import is cancelled (its chat
    # deleted), the others' embeddings must still arrive (this failed with InvalidStateError).
    inner = CountingEmbeddings()
    cache = CachedEmbeddings(inner)
    owner = asyncio.create_task(cache.aembed_documents(["the same message"]))
    await asyncio.sleep(0)  # the owner has registered the text as pending
    waiter = asyncio.create_task(cache.aembed_documents(["the same message"]))
    await asyncio.sleep(0.01)
    waiter.cancel()
    assert await owner == [[16.0, 1.0]]
    assert (await asyncio.gather(waiter, return_exceptions=True))[0].__class__ is asyncio.CancelledError
    assert not cache._pending


async def test_a_query_does_not_wait_on_the_same_text_embedded_in_the_background():
    """The background lane (embeddings.batching.in_background) runs at a lower priority: a reply's
    query for a text an import or a memory phase is embedding waited for that lane (3 s held: 3 s)."""
    release = asyncio.Event()

    class HeldInTheBackground(CountingEmbeddings):
        async def aembed_documents(self, texts):
            if background_now():
                await release.wait()
            return await super().aembed_documents(texts)

    inner = HeldInTheBackground()
    cache = CachedEmbeddings(inner)

    async def import_embeds():
        with in_background():
            return await cache.aembed_documents(["yes"])

    held = asyncio.create_task(import_embeds())
    await asyncio.sleep(0.01)  # the import's "yes" is pending
    assert await asyncio.wait_for(cache.aembed_query("yes"), 1) == [3.0, 1.0]  # embedded on its own lane
    release.set()
    assert await held == [[3.0, 1.0]]
