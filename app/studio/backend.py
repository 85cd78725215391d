"""Our Postgres behind ``langgraph dev`` / LangGraph Server: langgraph.json's
``checkpointer.path`` and ``store.path`` point at :func:`checkpointer` and :func:`store`.

Both yield from one :class:`~memory.backend.MemoryBackend` (``open_memory()``: the
embedded Postgres by default, ``DATABASE_URL`` otherwise; schema set-up is
idempotent), so the saver, the store and the API-key check of
``app/studio/auth.py`` share one connection pool instead of opening one each.

Sharing is reference-counted per event loop: a psycopg pool belongs to the loop it
was opened on, and the server may enter these context managers on more than one
loop (``BG_JOB_ISOLATED_LOOPS``), more than once, or concurrently. The last user
to leave closes the pool.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from contextlib import AsyncExitStack, asynccontextmanager
from typing import AsyncIterator

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.base import NOT_PROVIDED

from memory.writer import edits as memory_edits
from memory.backend import MemoryBackend, open_memory
from memory.kinds import kind_of_namespace
from storage.memory_store import MemoryStore
from storage.postgres import describe_location

log = logging.getLogger(__name__)


class _LoopSlot:
    """The backend open on one event loop and how many holders it has.

    A plain class, not a dataclass: langgraph_api loads ``store.path`` under a module
    name missing from ``sys.modules``, where ``@dataclass`` fails.
    """

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.backend: MemoryBackend | None = None
        self.stack: AsyncExitStack | None = None
        self.holders = 0


class SharedMemoryBackend:
    """One open backend per event loop, shared by everyone who enters :meth:`use`."""

    def __init__(self) -> None:
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSlot] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()  # the slots dict is shared across loop threads

    def _slot(self) -> _LoopSlot:
        loop = asyncio.get_running_loop()
        with self._guard:
            slot = self._slots.get(loop)
            if slot is None:
                slot = self._slots[loop] = _LoopSlot()
            return slot

    def holders(self) -> int:
        """How many holders the backend of the running loop has (0 when closed)."""
        return self._slot().holders

    @asynccontextmanager
    async def use(self) -> AsyncIterator[MemoryBackend]:
        slot = self._slot()
        async with slot.lock:  # concurrent first users wait for one open, not open two pools
            if slot.backend is None:
                stack = AsyncExitStack()
                backend = await stack.enter_async_context(open_memory())
                slot.backend, slot.stack = backend, stack
                log.info("memory-agent: checkpoints and memory in %s", describe_location(backend.url))
            slot.holders += 1
            backend = slot.backend
        try:
            yield backend
        finally:
            slot.holders -= 1
            if slot.holders == 0:
                async with slot.lock:
                    # Someone may have re-entered while we waited for the lock.
                    if slot.holders == 0 and slot.stack is not None:
                        stack, slot.stack, slot.backend = slot.stack, None, None
                        await stack.aclose()


_SHARED = SharedMemoryBackend()


def shared_backend() -> SharedMemoryBackend:
    """The process-wide :class:`SharedMemoryBackend`.

    langgraph_api imports ``checkpointer.path`` and ``store.path`` by file path, each
    as its own copy of this module; the shared state lives in the copy imported by
    name (``app.studio.backend``) so every copy reaches the same one.
    """
    from app.studio import backend as langgraph_server

    return langgraph_server._SHARED


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncPostgresSaver]:
    """langgraph.json ``checkpointer.path``: our AsyncPostgresSaver."""
    async with shared_backend().use() as backend:
        yield backend.checkpointer


class ServerStore(MemoryStore):
    """The server's store: what its store API puts or deletes in a user's memory goes through the
    one writer (memory.writer.edits) under the user's lock, with the writer's dedupe, as the
    chat API's writes do. app/studio/auth.py has checked the caller and the value first.

    Nothing else of ours calls ``aput``/``adelete`` on it: the graph's nodes write through the
    writer, whose transactions use a store of their own on one connection."""

    def __init__(self, backend: MemoryBackend) -> None:
        # The nodes of the server's runs get this store: a MemoryStore like every entry point's. Its
        # store API reads values as LangGraph's own store does (no load_value), as it always has.
        super().__init__(backend.pool, index=backend.store.index_config, deserializer=None)  # type: ignore[arg-type]
        self._plain = backend.store

    async def aput(self, namespace, key, value, index=None, *, ttl=NOT_PROVIDED) -> None:
        ns = tuple(namespace)
        if kind_of_namespace(ns) is None:
            return await super().aput(ns, key, value, index, ttl=ttl)
        await memory_edits.put_client_item(self._plain, ns[1], ns[2], key, dict(value))

    async def adelete(self, namespace, key) -> None:
        ns = tuple(namespace)
        if kind_of_namespace(ns) is None:
            return await super().adelete(ns, key)
        await memory_edits.delete_client_item(self._plain, ns[1], ns, key)


@asynccontextmanager
async def store() -> AsyncIterator[MemoryStore]:
    """langgraph.json ``store.path``: our MemoryStore (pgvector index on memory texts)."""
    async with shared_backend().use() as backend:
        yield ServerStore(backend)
