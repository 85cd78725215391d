"""Run every benchmark: python -m benchmarks (or `make bench`)."""

import subprocess
import sys

for module in ("benchmarks.bench_embeddings", "benchmarks.bench_turn"):
    print(f"== {module}", flush=True)
    subprocess.run([sys.executable, "-m", module], check=True)
