"""Benchmark 1 (python-only): F1 and exact match over N rows, cold cache then warm cache.

    python benchmarks/python_only.py [--rows 100000]
    python benchmarks/python_only.py --rows 1000000     # the memory target

Prints rows/s for the first run (empty cache) and the rerun (every node a cache hit), and the
peak RSS of the process (rows stream through; nothing grows with them but the aggregate's
column of one number per row). Data and cache live in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import flowkit

WORDS = [
    "the",
    "a",
    "an",
    "of",
    "river",
    "city",
    "paris",
    "capital",
    "france",
    "water",
    "boils",
    "degrees",
    "spider",
    "legs",
    "eight",
]


def make_data(path: Path, rows: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(rows):
            answer = " ".join(rng.choices(WORDS, k=8))
            truth = " ".join(rng.choices(WORDS, k=4))
            f.write(json.dumps({"id": i, "answer": answer, "ground_truth": truth}) + "\n")


def timed_run(data: Path, cache: Path, out: Path) -> tuple[float, flowkit.api.RunResult]:
    flow = flowkit.load_flow(Path(__file__).with_suffix(".yaml"))
    start = time.perf_counter()
    result = flowkit.run(flow, data, cache_dir=cache, output=out)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data.jsonl"
        make_data(data, args.rows)
        cold, r1 = timed_run(data, root / "cache", root / "run1")
        warm, r2 = timed_run(data, root / "cache", root / "run2")
        assert r1.counts["succeeded"] == args.rows and r2.counts["cache_hits"] >= 2 * args.rows
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"rows: {args.rows}")
        print(f"cold: {cold:.2f} s, {args.rows / cold:,.0f} rows/s (target >= 10,000)")
        print(f"warm: {warm:.2f} s, {args.rows / warm:,.0f} rows/s (target >= 50,000)")
        print(f"peak RSS: {peak_mb:.0f} MB (target < 300 MB at 1,000,000 rows)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
