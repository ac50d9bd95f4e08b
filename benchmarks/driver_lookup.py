"""A rerun on workers: how many model calls it makes, and how long it takes.

    python benchmarks/driver_lookup.py [--rows 2000] [--backend loky] [--workers 2]

Runs `groundedness` over ROWS rows locally against flowkit's test server (started here), with
a cache in a temporary folder, then reruns it on BACKEND with WORKERS workers. Workers have no
cache store of their own (flowkit.runs.lookup): the rerun's calls should be 0, every row
answered by the driver's lookup before anything is sent. Prints each run's model calls and
wall time. (tests/runs/test_driver_lookup.py checks the same on Dask workers whose own cache
folder differs from the driver's, as on another machine.)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import flowkit
from flowkit.testing.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--backend", default="loky")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve() as server:
        work = Path(tmp)
        data = work / "qa.jsonl"
        rows = (
            {"question": f"q {i}?", "context": f"context {i} about rivers", "answer": f"a {i}"}
            for i in range(args.rows)
        )
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        os.environ.update(
            OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-local", FLOWKIT_MODEL="bench"
        )
        cache = str(work / "cache")
        os.chdir(work)
        began = time.monotonic()
        flowkit.run("groundedness", data, output="first", cache_dir=cache, concurrency=64)
        first = server.stats()["chat_completions"], time.monotonic() - began
        server.reset()
        began = time.monotonic()
        flowkit.run(
            "groundedness",
            data,
            output="again",
            cache_dir=cache,
            backend=args.backend,
            workers=args.workers,
        )
        again = server.stats()["chat_completions"], time.monotonic() - began
    print(f"first run, local: {first[0]} model calls, {first[1]:.1f} s")
    print(f"rerun, {args.backend} x{args.workers}: {again[0]} model calls, {again[1]:.1f} s")


if __name__ == "__main__":
    main()
