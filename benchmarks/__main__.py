"""Run every benchmark: python -m benchmarks (or `make bench`)."""

import subprocess
import sys

RUNS = [
    ["benchmarks.bench_embeddings"],
    ["benchmarks.bench_turn"],
    # 1,000 memories per user as in the full-size run (README), on a tenth of the users;
    # the full size: python -m benchmarks.bench_recall (seeding takes ~15 minutes).
    ["benchmarks.bench_recall", "--memories", "100000", "--users", "100"],
]

for module, *args in RUNS:
    print(f"== {module} {' '.join(args)}".rstrip(), flush=True)
    subprocess.run([sys.executable, "-m", module, *args], check=True)
