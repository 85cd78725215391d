"""The process' embedding threads (embeddings.batching): few encodes at once, what waits goes
together, queries before an import's texts, background work on a lane of its own at a lower
priority, failures and cancelled callers handled."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from embeddings import MiniLMEmbeddings, resolve_minilm_dir
from embeddings import encoder as emb_mod
from embeddings.batching import BACKGROUND_NICE, MAX_BATCH_TEXTS, BatchingEncoder, LanedEncoder, default_threads, in_background


def vectors_of(texts) -> np.ndarray:
    """A stand-in encoder's output: each text's length, so a row shows whose it is."""
    return np.array([[float(len(t))] for t in texts], dtype=np.float32)


class RecordingEncode:
    """Records each batch it is given and how many run at once; ``gate`` holds the first batch."""

    def __init__(self, *, hold_first: bool = False, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.started = threading.Event()
        self.hold_first = hold_first
        self.fail_on = fail_on
        if not hold_first:
            self.gate.set()

    def __call__(self, texts) -> np.ndarray:
        with self.lock:
            self.batches.append(list(texts))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        self.started.set()
        try:
            self.gate.wait(10)
            time.sleep(0.002)
            if self.fail_on is not None and self.fail_on in texts:
                raise ValueError(f"cannot encode {self.fail_on!r}")
            return vectors_of(texts)
        finally:
            with self.lock:
                self.running -= 1


def busy_batcher(**options) -> tuple[RecordingEncode, BatchingEncoder]:
    """One thread, busy with a first batch ("busy") held until ``encode.gate`` is set."""
    encode = RecordingEncode(hold_first=True, **options)
    batcher = BatchingEncoder(encode, threads=1)
    batcher.submit(["busy"])
    assert encode.started.wait(5)
    return encode, batcher


def test_texts_that_arrive_while_the_thread_is_busy_go_in_one_batch_in_order() -> None:
    encode = RecordingEncode(hold_first=True)
    batcher = BatchingEncoder(encode, threads=1)
    first = batcher.submit(["first"])
    assert encode.started.wait(5)
    waiting = [batcher.submit([f"q{i}" * (i + 1)]) for i in range(10)]
    encode.gate.set()
    assert first.result(5).tolist() == [[5.0]]
    assert [f.result(5).tolist() for f in waiting] == [[[2.0 * (i + 1)]] for i in range(10)]
    # The ten that waited were encoded together, after the first.
    assert encode.batches == [["first"], [f"q{i}" * (i + 1) for i in range(10)]]


def test_at_most_the_configured_threads_encode_at_once() -> None:
    encode = RecordingEncode()
    batcher = BatchingEncoder(encode, threads=2)
    futures = [batcher.submit([f"text {i}"]) for i in range(40)]
    for i, f in enumerate(futures):
        assert f.result(5).tolist() == [[float(len(f"text {i}"))]]
    assert encode.most_at_once <= 2
    assert len(encode.batches) < 40


def test_a_query_goes_before_an_imports_texts_that_wait() -> None:
    encode, batcher = busy_batcher()
    long = batcher.submit([f"imported message {i}" for i in range(3 * MAX_BATCH_TEXTS)])
    query = batcher.submit(["the user's question"])
    encode.gate.set()
    assert query.result(5).tolist() == [[float(len("the user's question"))]]
    assert long.result(5).tolist() == [[float(len(f"imported message {i}"))] for i in range(3 * MAX_BATCH_TEXTS)]
    # The query rode in the first batch after the busy one; the import came in parts of at most MAX_BATCH_TEXTS.
    assert encode.batches[1][0] == "the user's question"
    assert all(len(b) <= MAX_BATCH_TEXTS + 1 for b in encode.batches)
    assert sum(len(b) for b in encode.batches[1:]) == 3 * MAX_BATCH_TEXTS + 1


def test_an_import_moves_on_while_queries_keep_coming() -> None:
    encode, batcher = busy_batcher()
    long = batcher.submit([f"imported {i}" for i in range(2 * MAX_BATCH_TEXTS)])
    queries = [batcher.submit([f"query {i}"]) for i in range(MAX_BATCH_TEXTS)]  # a full batch of them
    encode.gate.set()
    assert long.result(5).shape == (2 * MAX_BATCH_TEXTS, 1)
    assert all(q.result(5).shape == (1, 1) for q in queries)
    # The batch after the busy one held the waiting queries and the import's first part.
    assert encode.batches[1][:MAX_BATCH_TEXTS] == [f"query {i}" for i in range(MAX_BATCH_TEXTS)]
    assert encode.batches[1][MAX_BATCH_TEXTS:] == [f"imported {i}" for i in range(MAX_BATCH_TEXTS)]


def test_a_query_is_encoded_while_the_background_lane_is_busy() -> None:
    """One lane for everything made a query wait behind whatever was being encoded: under a burst,
    the memory phases' turns and chat texts (64-256 pieces each) ahead of the next message's query."""
    gate, started = threading.Event(), threading.Event()

    def encode(texts):
        if "memory phase" in texts[0]:
            started.set()
            gate.wait(10)
        return vectors_of(texts)

    lanes = LanedEncoder(encode, threads=1)
    with in_background():
        held = lanes.submit(["a turn the memory phase indexes"])
    assert started.wait(5)
    assert lanes.submit(["the user's question"]).result(5).tolist() == [[19.0]]  # while the other lane is held
    assert not held.done()
    gate.set()
    assert held.result(5).tolist() == [[31.0]]


def test_background_embeddings_run_on_a_thread_the_system_runs_at_a_lower_priority() -> None:
    seen: list[tuple[str, str, int | None]] = []

    def encode(texts):
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) if sys.platform.startswith("linux") else None
        seen.append((texts[0], threading.current_thread().name, nice))
        return vectors_of(texts)

    lanes = LanedEncoder(encode, threads=1)
    lanes.submit(["now"]).result(5)

    async def embed(text: str):
        return await asyncio.wrap_future(lanes.submit([text]))

    async def memory_phase():  # the lane is the caller's context's: tasks it starts inherit it
        with in_background():
            return await asyncio.create_task(embed("later"))

    asyncio.run(memory_phase())
    lanes.submit(["now again"]).result(5)
    (_, now_thread, now_nice), (_, later_thread, later_nice), (_, again_thread, _) = seen
    assert now_thread.startswith("embed_") and again_thread.startswith("embed_") and later_thread.startswith("embed-bg")
    if sys.platform.startswith("linux"):
        assert now_nice == os.getpriority(os.PRIO_PROCESS, 0) and later_nice == max(now_nice, BACKGROUND_NICE)


def test_a_process_shutting_down_refuses_new_texts_rather_than_hanging() -> None:
    batcher = BatchingEncoder(vectors_of, threads=1)
    batcher._pool.shutdown()
    with pytest.raises(RuntimeError):
        batcher.submit(["late"])
    assert batcher._busy == 0 and not batcher._short and not batcher._long


def test_a_failed_batch_fails_its_callers_and_the_next_ones_are_encoded() -> None:
    encode, batcher = busy_batcher(fail_on="bad")
    bad, neighbour = batcher.submit(["bad"]), batcher.submit(["fine"])
    encode.gate.set()
    with pytest.raises(ValueError, match="cannot encode 'bad'"):
        bad.result(5)
    with pytest.raises(ValueError):  # it shared the batch
        neighbour.result(5)
    assert batcher.submit(["later"]).result(5).tolist() == [[5.0]]


def test_a_caller_that_gave_up_is_not_encoded() -> None:
    encode, batcher = busy_batcher()
    gone = batcher.submit(["never mind"])
    assert gone.cancel()
    kept = batcher.submit(["still wanted"])
    encode.gate.set()
    assert kept.result(5).tolist() == [[12.0]]
    assert ["never mind"] not in encode.batches and all("never mind" not in b for b in encode.batches)


def test_the_thread_count_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_AGENT_EMBEDDING_THREADS", "3")
    assert default_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MEMORY_AGENT_EMBEDDING_THREADS", bad)
        with pytest.raises(ValueError, match="MEMORY_AGENT_EMBEDDING_THREADS must be at least 1"):
            default_threads()
    monkeypatch.delenv("MEMORY_AGENT_EMBEDDING_THREADS")
    assert default_threads() >= 1


async def test_many_concurrent_queries_share_few_forward_passes_and_match_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured cost (issue 27): under a burst each caller had a thread of its own and BLAS
    ran six wide on two cores. Now one encode runs at a time here, and the queries that waited
    are encoded together, with the same vectors as one by one."""
    minilm_dir: Path = resolve_minilm_dir(allow_download=False)
    monkeypatch.setenv("MEMORY_AGENT_EMBEDDING_THREADS", "1")
    monkeypatch.setattr(emb_mod, "_BATCHERS", {})
    model = MiniLMEmbeddings(minilm_dir)
    texts = [f"Message {i}: what did I say about the garden and the bees in May?" for i in range(20)]
    expected = model.embed_documents(texts)  # one forward pass over all, on this thread

    real_encode = emb_mod._MiniLMModel.encode
    calls, running, most = [], [0], [0]
    lock = threading.Lock()

    def counting_encode(self, batch, batch_size):
        with lock:
            calls.append(len(batch))
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            time.sleep(0.005)  # long enough for the other callers to queue
            return real_encode(self, batch, batch_size)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(emb_mod._MiniLMModel, "encode", counting_encode)
    # (the memo of word pieces would answer from what embed_documents computed: another text each time)
    fresh = [t + " Again." for t in texts]
    results = await asyncio.gather(*(model.aembed_query(t) for t in fresh))
    assert most[0] == 1
    assert len(calls) < len(fresh), calls
    monkeypatch.setattr(emb_mod._MiniLMModel, "encode", real_encode)
    np.testing.assert_allclose(results, model.embed_documents(fresh), atol=1e-5)
    assert np.asarray(expected).shape == np.asarray(results).shape
