"""The one store memory-agent runs on, and the one way code below the entry points reaches it.

LangGraph hands a node nothing of ours but ``runtime.store`` (``langgraph dev`` builds it from
langgraph.json's ``store.path``), so the store is what carries everything a node needs besides:
the connection pool (our own tables, the knowledge base, the episodic index), the embeddings and
a reader of the checkpoints (the agent's tools read other chats through it). :class:`MemoryStore`
is LangGraph's Postgres store with those as typed attributes; :func:`memory_store` is how a node,
a tool or a memory function gets it from the store it was given, and refuses any other store.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from langchain_core.embeddings import Embeddings
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.base import BaseStore, Op, PutOp, Result
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.store.postgres.base import PostgresIndexConfig
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from core.text_validation import made_storable_value
from storage.checkpoint_serde import checkpoint_saver
from storage.store_values import load_value


class MemoryStore(AsyncPostgresStore):
    """LangGraph's Postgres store with its pool, embeddings and checkpoint reader typed.

    ``conn`` is what the store's own reads and writes run on: the pool, or one connection for a
    store bound to a transaction (:meth:`on_connection`, storage/user_transaction.py). ``pool`` is
    always the pool, for what runs outside that transaction.
    """

    pool: AsyncConnectionPool
    embeddings: Embeddings

    def __init__(
        self,
        conn: AsyncConnectionPool | AsyncConnection,
        *,
        index: PostgresIndexConfig,
        pool: AsyncConnectionPool | None = None,
        deserializer: Callable[[Any], dict[str, Any]] | None = load_value,
    ) -> None:
        super().__init__(conn, index=index, deserializer=deserializer)  # refuses an index without "embed"
        pool = pool if pool is not None else conn
        if not isinstance(pool, AsyncConnectionPool):
            raise TypeError("MemoryStore needs the connection pool (pass pool= with a single connection)")
        if self.embeddings is None:
            raise TypeError("MemoryStore needs an index with embeddings (index['embed'])")
        self.pool = pool

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Every write with what Postgres cannot store (a NUL, a lone surrogate) replaced by U+FFFD,
        whichever caller wrote it: the routes refuse such text, but what is derived from a thread's
        messages (a chat's record, its text) follows whatever the state holds, and an ``Overwrite``
        of the state skips the reducers that replace it there (core.state). One failed write would
        fail every later turn of the thread."""
        return await super().abatch([_storable(op) for op in ops])

    def on_connection(self, conn: AsyncConnection) -> MemoryStore:
        """A store of its own on ``conn`` (one transaction), with this one's index, embeddings and pool,
        reading with load_value. Not a copy of this store: a copy shares its batching task and
        cancels it when collected."""
        return MemoryStore(conn, index=self.index_config, pool=self.pool)  # type: ignore[arg-type]

    def checkpoint_reader(self) -> AsyncPostgresSaver:
        """A saver reading the checkpoints in this store's database: LangGraph gives a node its
        store, and its own checkpointer only under a private config key."""
        return checkpoint_saver(self.pool)


def _storable(op: Op) -> Op:
    if isinstance(op, PutOp) and op.value is not None:
        value = made_storable_value(op.value)
        if value is not op.value:
            return op._replace(value=value)
    return op


def memory_store(store: BaseStore | None) -> MemoryStore:
    """``store`` as the :class:`MemoryStore` it must be; a clear TypeError for any other store."""
    if isinstance(store, MemoryStore):
        return store
    raise TypeError(
        f"memory-agent runs on its own Postgres store (storage.memory_store.MemoryStore, built by "
        f"memory.backend.make_store or opened by memory.backend.open_memory), not {type(store).__name__}"
    )
