"""The checkpointer's serializer: LangGraph's, with a chat's messages kept decoded between reads.

A turn runs in two phases (the reply, then the memory phase), and each starts by reading the
thread's latest checkpoint, which decodes every message of the chat: ~23 ms at 2,000 messages,
~60 ms at 5,000, twice a turn, for a list that the phase before had just written or read. This
serializer keeps the decoded message lists of large blobs, keyed by a digest of their bytes: a read
of the same bytes gets the same messages without decoding them again (a copy of the list; the
messages themselves are never changed in place: redaction and edits make copies). The key is the
content, so a blob a forget rewrote is a different key and is decoded from its new bytes.

``MEMORY_AGENT_CHECKPOINT_CACHE_MB`` (default 16) bounds the kept blobs' encoded size per process;
0 turns the cache off. Decoded messages take ~5× their encoded size.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from core.errors import SettingError

CACHE_ENV = "MEMORY_AGENT_CHECKPOINT_CACHE_MB"
DEFAULT_CACHE_MB = 16
#: Smaller blobs (~200 messages) decode in about a millisecond: not worth their memory.
MIN_CACHED_BYTES = 64 * 1024


def cache_budget_bytes() -> int:
    """The documented setting (unset or empty: the default); a clear error for a bad value."""
    raw = os.environ.get(CACHE_ENV, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB * 1024 * 1024
    try:
        mb = float(raw)
    except ValueError:
        raise SettingError(f"{CACHE_ENV}={raw!r}: give a size in megabytes (0 turns the cache off)") from None
    if not mb >= 0:  # nan too
        raise SettingError(f"{CACHE_ENV}={raw!r}: give a size in megabytes, 0 or more")
    return int(mb * 1024 * 1024)


class DecodedMessages:
    """Decoded message lists by (type, digest of their bytes), least recently used out first."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self.hits = self.misses = 0
        self._items: OrderedDict[tuple[str, bytes], tuple[int, tuple[BaseMessage, ...]]] = OrderedDict()
        self._lock = threading.Lock()  # a saver may decode in a worker thread

    def get(self, key: tuple[str, bytes]) -> list[BaseMessage] | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
        return list(found[1])  # the caller's own list: a channel may append to it

    def put(self, key: tuple[str, bytes], size: int, messages: list[BaseMessage]) -> None:
        if size > self.budget:
            return
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return
            self._items[key] = (size, tuple(messages))
            self.used += size
            while self.used > self.budget:
                _, (dropped, _) = self._items.popitem(last=False)
                self.used -= dropped


_DECODED: DecodedMessages | None = None


def decoded_messages() -> DecodedMessages:
    """The process' one cache, shared by every saver (the graph's, the forget's, the routes')."""
    global _DECODED
    if _DECODED is None:
        _DECODED = DecodedMessages(cache_budget_bytes())
    return _DECODED


def _is_messages(obj: Any) -> bool:
    return isinstance(obj, list) and bool(obj) and all(isinstance(m, BaseMessage) for m in obj)


class CheckpointSerializer(JsonPlusSerializer):
    """JsonPlusSerializer (a subclass, so LangGraph's msgpack allowlist still applies to it) that
    keeps large decoded message lists: see the module's docstring."""

    def __init__(self, *args: Any, cache: DecodedMessages | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache = cache if cache is not None else decoded_messages()

    def _key(self, type_: str, data: bytes) -> tuple[str, bytes] | None:
        if self.cache.budget <= 0 or len(data) < MIN_CACHED_BYTES:
            return None
        return type_, hashlib.blake2b(data, digest_size=16).digest()  # ~1.3 ms a megabyte

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        type_, data = super().dumps_typed(obj)
        if _is_messages(obj) and (key := self._key(type_, data)) is not None:
            self.cache.put(key, len(data), obj)  # the next phase reads these bytes back
        return type_, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, raw = data
        key = self._key(type_, raw) if isinstance(raw, (bytes, bytearray, memoryview)) else None
        if key is not None and (cached := self.cache.get(key)) is not None:
            return cached
        obj = super().loads_typed(data)
        if key is not None and _is_messages(obj):
            self.cache.put(key, len(raw), obj)
        return obj


def checkpoint_saver(pool) -> AsyncPostgresSaver:
    """LangGraph's Postgres saver on ``pool``, with this serializer: every saver of the app's is made here."""
    return AsyncPostgresSaver(pool, serde=CheckpointSerializer())  # type: ignore[arg-type]
