"""The process' embedding work on a few threads, with what arrives meanwhile encoded together.

``asyncio.to_thread`` gave every concurrent caller a thread of its own: under a burst of turns
(50 users on 2 cores) six threads ran BLAS side by side with the event loop and Postgres, and a
query's encoding took ~30 ms of CPU instead of ~17 (caches and cores shared). Here at most
``threads`` encode at once; texts that arrive while they are busy wait, and go in the next
forward pass together (a batch of short texts costs ~40 % less CPU per text than one at a time).

Short requests (a query, a turn) go first; a long one (an import's batch of texts) goes
``MAX_BATCH_TEXTS`` texts at a time, one part per batch, so a message's query never waits behind
a whole import and the import still moves on while queries keep coming.

Work no reply waits on (a turn's memory phase, after its reply; an import: :func:`in_background`)
is encoded on a lane of its own, threads the operating system runs at a lower priority: under load
the CPU goes to the replies first. The lane is slowed, not stopped: the turn's ``done`` and the
chat's next message wait for its memory phase, so its niceness is moderate.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar

import numpy as np

from core.errors import SettingError

MAX_BATCH_TEXTS = 32
"""Texts per forward pass at most (the encoder's own batch size)."""
SHORT_REQUEST = 4
"""A request of at most this many texts is served first (queries, a turn's messages)."""
BACKGROUND_NICE = 10
"""The background lane's threads' niceness (Linux; the event loops and Postgres stay at 0): about a
tenth of a core's share when every core is busy, all of it when one is idle."""

_BACKGROUND: ContextVar[bool] = ContextVar("memory_agent_background_embeddings", default=False)


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Embeddings asked for inside the block (and the tasks it starts) go on the background lane."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


def background_now() -> bool:
    """Whether the caller is inside :func:`in_background`."""
    return _BACKGROUND.get()


def _lower_priority() -> None:
    """The calling thread's own niceness (Linux sets it per thread); elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), BACKGROUND_NICE))  # never raised


def default_threads() -> int:
    """Half the cores, at least one: BLAS runs on one thread per encode (embeddings.encoder), and
    the other half is left to Postgres and the event loops. ``MEMORY_AGENT_EMBEDDING_THREADS`` sets it."""
    configured = os.environ.get("MEMORY_AGENT_EMBEDDING_THREADS", "").strip()
    if configured:
        value = int(configured) if configured.isdigit() else 0
        if value < 1:
            raise SettingError(f"MEMORY_AGENT_EMBEDDING_THREADS must be at least 1, not {configured!r}")
        return value
    return max(1, (os.cpu_count() or 2) // 2)


class _Part:
    """Some texts of one request, and where their vectors go."""

    __slots__ = ("texts", "future")

    def __init__(self, texts: list[str], future: concurrent.futures.Future) -> None:
        self.texts = texts
        self.future = future


class BatchingEncoder:
    """``submit(texts)`` → a future of their vectors (float32, one row per text), in order."""

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], threads: int | None = None, *, background: bool = False) -> None:
        self._encode = encode
        self.threads = threads if threads is not None else default_threads()
        self._lock = threading.Lock()
        self._short: deque[_Part] = deque()
        self._long: deque[_Part] = deque()
        self._busy = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.threads, thread_name_prefix="embed-bg" if background else "embed", initializer=_lower_priority if background else None
        )

    def submit(self, texts: Sequence[str]) -> concurrent.futures.Future:
        texts = list(texts)
        parts = [_Part(texts[i : i + MAX_BATCH_TEXTS], concurrent.futures.Future()) for i in range(0, len(texts), MAX_BATCH_TEXTS)]
        with self._lock:
            (self._short if len(texts) <= SHORT_REQUEST else self._long).extend(parts)
            start = min(self.threads - self._busy, len(parts))
            self._busy += start
        for started in range(start):
            try:
                self._pool.submit(self._drain)
            except RuntimeError:  # the process is shutting down: say so rather than wait for ever
                with self._lock:
                    self._busy -= start - started
                    for part in parts:
                        for queue in (self._short, self._long):
                            if part in queue:
                                queue.remove(part)
                raise
        if len(parts) == 1:
            return parts[0].future
        return _joined([p.future for p in parts])

    def _take(self) -> list[_Part]:
        """The next batch: the short requests waiting (up to MAX_BATCH_TEXTS texts), then one part
        of a long one, so an import moves on while queries keep coming. A part whose caller gave up
        is dropped."""
        batch: list[_Part] = []
        size = 0
        while self._short and (not batch or size + len(self._short[0].texts) <= MAX_BATCH_TEXTS):
            part = self._short.popleft()
            if part.future.set_running_or_notify_cancel():
                batch.append(part)
                size += len(part.texts)
        while self._long:
            part = self._long.popleft()
            if part.future.set_running_or_notify_cancel():
                batch.append(part)
                break
        return batch

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._busy -= 1
                    return
            try:
                vectors = self._encode([t for part in batch for t in part.texts])
            except BaseException as exc:  # every caller of the batch learns why
                for part in batch:
                    part.future.set_exception(exc)
                continue
            start = 0
            for part in batch:
                part.future.set_result(vectors[start : start + len(part.texts)])
                start += len(part.texts)


class LanedEncoder:
    """Two :class:`BatchingEncoder` lanes of as many threads: ``submit`` goes on the background one
    inside :func:`in_background`, else on the one a reply waits on."""

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], threads: int | None = None) -> None:
        self.now = BatchingEncoder(encode, threads)
        self.background = BatchingEncoder(encode, threads, background=True)

    def submit(self, texts: Sequence[str]) -> concurrent.futures.Future:
        return (self.background if _BACKGROUND.get() else self.now).submit(texts)


def _joined(futures: list[concurrent.futures.Future]) -> concurrent.futures.Future:
    """One future of the parts' vectors stacked in order (the first failure, if any)."""
    joined: concurrent.futures.Future = concurrent.futures.Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def done(_: concurrent.futures.Future) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        if joined.done():
            return
        failed = next((f for f in futures if f.cancelled() or f.exception() is not None), None)
        if failed is not None:
            joined.set_exception(failed.exception() if not failed.cancelled() else concurrent.futures.CancelledError())
        else:
            joined.set_result(np.concatenate([f.result() for f in futures]))

    for f in futures:
        f.add_done_callback(done)
    return joined
