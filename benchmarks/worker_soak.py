"""Benchmark (soak): long-lived Dask workers' memory across repeated runs.

    python benchmarks/worker_soak.py [--rows 50000] [--runs 6] [--workers 2]

A local Dask cluster (its address passed as ``--scheduler``, as a user's own cluster is) runs
the built-in python-only ``f1_score`` flow over N rows, again and again, with the cache on (a
run's new entries come back to the driver) and a fresh cache folder each run, so every run
computes every row. After each run it prints each worker's resident memory (psutil, which
dask.distributed depends on) and its growth since the first run: workers that keep what runs
leave behind grow by about the same amount each run; healthy ones level off after the first.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path


def _rss() -> int:
    import gc

    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    import flowkit

    work = Path(tempfile.mkdtemp(prefix="flowkit-soak-"))
    words = ["the", "a", "river", "city", "paris", "france", "water", "boils", "spider", "legs"]
    rng = random.Random(0)
    data = work / "qa.jsonl"
    with data.open("w") as f:
        for _ in range(args.rows):
            row = {"answer": " ".join(rng.choices(words, k=8))}
            row["ground_truth"] = " ".join(rng.choices(words, k=5))
            f.write(json.dumps(row) + "\n")
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        Client(cluster.scheduler_address) as client,
    ):
        first: dict[str, int] = {}
        print(f"{args.workers} Dask workers, f1_score over {args.rows} rows per run")
        for run in range(1, args.runs + 1):
            t0 = time.monotonic()
            flowkit.run(
                "f1_score",
                str(data),
                backend="dask",
                scheduler=cluster.scheduler_address,
                cache_dir=str(work / f"cache-{run}"),
                output=str(work / f"run-{run}"),
            )
            took = time.monotonic() - t0
            rss = client.run(_rss)
            first = first or rss
            shown = ", ".join(
                f"{rss[w] / 2**20:.0f} MB ({(rss[w] - first[w]) / 2**20:+.0f})" for w in sorted(rss)
            )
            print(f"run {run}: {took:.1f} s; workers' memory: {shown}", flush=True)


if __name__ == "__main__":
    main()
