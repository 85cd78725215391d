"""The offline model at a human pace: each streamed word arrives after ``delay_ms``.

For demos of streaming and of the web page's stop button, and for tests that must
catch a reply mid-stream. Spec: ``offline-slow`` (150 ms a word) or
``offline-slow:<ms>``. Otherwise identical to :class:`offline_model.model.OfflineChatModel`
(deterministic, not an LLM, never calls tools); structured calls are not slowed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterator

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult

from offline_model.model import OfflineChatModel

SPEC = "offline-slow"
DEFAULT_DELAY_MS = 150


class SlowOfflineChatModel(OfflineChatModel):
    model_name: str = SPEC
    delay_ms: int = DEFAULT_DELAY_MS

    def delay_for(self, messages: list[BaseMessage]) -> float:
        """Seconds to wait before each word of a reply to ``messages`` (subclasses may vary it)."""
        return self.delay_ms / 1000

    async def _astream(self, messages, stop=None, run_manager=None, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        delay = self.delay_for(messages)
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            await asyncio.sleep(delay)
            yield chunk

    def _stream(self, messages, stop=None, run_manager=None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        delay = self.delay_for(messages)
        for chunk in super()._stream(messages, stop, run_manager, **kwargs):
            time.sleep(delay)
            yield chunk

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        result = self._generate(messages, stop, None, **kwargs)
        words = len(str(result.generations[0].message.content).split())
        await asyncio.sleep(self.delay_for(messages) * words)
        return result


MAX_DELAY_MS = 2000


def from_spec(spec: str) -> SlowOfflineChatModel:
    """``offline-slow`` or ``offline-slow:<ms>``."""
    name, _, ms = spec.partition(":")
    if name != SPEC:
        raise ValueError(f"not an {SPEC} spec: {spec!r}")
    if not ms:
        return SlowOfflineChatModel()
    if not ms.isdigit():
        raise ValueError(f"{spec!r}: the delay must be whole milliseconds, e.g. {SPEC}:200")
    if int(ms) > MAX_DELAY_MS:  # a reply at 10^11 ms a word would hold a run slot for ever
        raise ValueError(f"{spec!r}: the delay is at most {MAX_DELAY_MS} ms a word")
    return SlowOfflineChatModel(delay_ms=int(ms), model_name=spec)
