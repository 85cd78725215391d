"""Time the numpy all-MiniLM-L6-v2 encoder (not a pytest test).

    python benchmarks/bench_embeddings.py [--runs 5] [--batch-size 32] [--blas-threads 1]
    python -m benchmarks.bench_embeddings

Prints the median wall time to embed 1, 32 and 256 chat-like sentences, plus the
one-off weight-loading cost and a description of the machine.

``--blas-threads`` sets OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS; it
only takes effect if numpy has not been imported yet (true when run as a script).
On a busy machine (load average above the CPU count) multi-threaded OpenBLAS can be
several times slower than one thread, so compare both.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

_SUBJECTS = ["I", "My sister", "The team", "Our landlord", "The doctor", "My manager", "We"]
_VERBS = ["need to", "promised to", "forgot to", "would like to", "will", "should"]
_OBJECTS = [
    "book a table for four at the Italian place on Friday",
    "send the quarterly report before the board meeting",
    "renew the passport that expires in March",
    "fix the leaking kitchen tap",
    "buy oat milk, eggs and fresh basil",
    "call back about the insurance claim for the car",
    "review the pull request that changes the database schema",
]
_TAILS = [
    "",
    " tomorrow.",
    " next week, ideally before noon.",
    " — it's urgent!",
    " if it's not raining.",
]
_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def make_sentences(n: int) -> list[str]:
    """Deterministic, varied, chat-memory-like sentences (~10-25 word pieces each)."""
    return [
        _SUBJECTS[i % len(_SUBJECTS)]
        + " "
        + _VERBS[(i // 3) % len(_VERBS)]
        + " "
        + _OBJECTS[(i // 5) % len(_OBJECTS)]
        + _TAILS[(i // 7) % len(_TAILS)]
        for i in range(n)
    ]


def _median_seconds(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per size (median)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--blas-threads", type=int, default=None, help="BLAS thread count")
    args = parser.parse_args(argv)

    blas_note = "default"
    if args.blas_threads is not None:
        if "numpy" in sys.modules:
            blas_note = "--blas-threads ignored: numpy was already imported"
        else:
            for name in _BLAS_ENV:
                os.environ[name] = str(args.blas_threads)
            blas_note = str(args.blas_threads)
    elif env := [f"{n}={os.environ[n]}" for n in _BLAS_ENV if n in os.environ]:
        blas_note = ", ".join(env)

    if __package__ in (None, ""):  # run as a script: make `memory` importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from embeddings import MiniLMEmbeddings  # after the BLAS env is set

    model = MiniLMEmbeddings(batch_size=args.batch_size)
    start = time.perf_counter()
    model.embed_query("warm-up")  # resolves the weights dir and loads ~90 MB once
    load_s = time.perf_counter() - start

    load_avg = "n/a"
    if hasattr(os, "getloadavg"):
        load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine : {platform.processor() or platform.machine()} | cpus={os.cpu_count()} "
        f"| python {platform.python_version()} ({platform.system()}) | load avg {load_avg}"
    )
    print(f"model   : {model.model_name} from {model.model_dir}")
    print(f"blas    : threads {blas_note}")
    print(f"load    : {load_s * 1000:.0f} ms (first call, includes weight loading)")
    print(f"runs    : median of {args.runs}, batch_size={args.batch_size}")
    print()
    print(f"{'sentences':>9} | {'median ms':>10} | {'ms/sentence':>11} | {'sentences/s':>11}")
    print(f"{'-' * 9}-+-{'-' * 10}-+-{'-' * 11}-+-{'-' * 11}")
    for n in args.sizes:
        texts = make_sentences(n)
        model.embed_documents(texts)  # warm-up for this shape
        secs = _median_seconds(lambda: model.embed_documents(texts), args.runs)
        print(f"{n:>9} | {secs * 1000:>10.1f} | {secs * 1000 / n:>11.2f} | {n / secs:>11.0f}")


if __name__ == "__main__":
    main()
