"""Run every benchmark: python -m benchmarks (or `make bench`); or one with its options:
python -m benchmarks bench_turn --messages 100000 --other-users 900 --other-messages 1000."""

import subprocess
import sys

RUNS = [
    ["benchmarks.bench_embeddings"],
    ["benchmarks.bench_turn"],
    # 1,000 memories per user as in the full-size run (README), on a tenth of the users;
    # the full size: python -m benchmarks.bench_recall (seeding takes ~15 minutes).
    ["benchmarks.bench_recall", "--memories", "100000", "--users", "100"],
]

if len(sys.argv) > 1:
    name = sys.argv[1].removeprefix("benchmarks.")
    if [f"benchmarks.{name}"] not in [run[:1] for run in RUNS] + [["benchmarks.bench_local_model"], ["benchmarks.load_with_kill"], ["benchmarks.bench_import_flood"], ["benchmarks.bench_chat_history"]]:
        sys.exit(f"unknown benchmark {sys.argv[1]!r}; one of: {', '.join(run[0].split('.')[1] for run in RUNS)}")
    RUNS = [[f"benchmarks.{name}", *sys.argv[2:]]]

for module, *args in RUNS:
    print(f"== {module} {' '.join(args)}".rstrip(), flush=True)
    subprocess.run([sys.executable, "-m", module, *args], check=True)
