"""A rerun on workers: how many model calls it makes, and how long it takes.

    python benchmarks/driver_lookup.py [--rows 2000] [--backend loky] [--workers 2]

Runs `groundedness` over ROWS rows locally against flowkit's test server (started here), with
a cache in a temporary folder, then reruns it on BACKEND with WORKERS workers. Workers have no
cache store of their own (flowkit.runs.lookup): the rerun's calls should be 0, every row
answered by the driver's lookup before anything is sent. Prints each run's model calls and
wall time. (tests/runs/test_driver_lookup.py checks the same on Dask workers whose own cache
folder differs from the driver's, as on another machine.)

Then an upstream edit whose output comes out unchanged, over CHAIN_ROWS rows of a chain of
three model calls (the first one's reply fixed by the test server's `[[reply: …]]` directive):
run once, its first prompt edited, then run again locally and on BACKEND, each from a copy of
the first run's cache. Both should pay for the first node alone (one call a row): the second
and third nodes' keys are known only once the first has run, on the worker, which asks the
driver's cache for them before paying.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from textwrap import dedent

import flowkit
from flowkit.testing.server import LocalServer, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the flow of the tests
from tests.runs.test_driver_lookup import CHAIN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--backend", default="loky")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chain-rows", type=int, default=200)
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
        edited(work, server, args.chain_rows, args.backend, args.workers)


def edited(work: Path, server: LocalServer, rows: int, backend: str, workers: int) -> None:
    """The chain's first prompt edited (its output unchanged): calls locally and on workers."""
    data = work / "chain.jsonl"
    data.write_text("".join(json.dumps({"q": f"question {i}"}) + "\n" for i in range(rows)))
    flow = work / "chain.yaml"
    flow.write_text(dedent(CHAIN).replace("FIRST_PROMPT", "Tell me"))
    flowkit.run(flow, data, output="chain", cache_dir=work / "chain-cache", concurrency=64)
    flow.write_text(dedent(CHAIN).replace("FIRST_PROMPT", "Tell me please"))
    for name, options in (
        ("local", {}),
        (f"{backend} x{workers}", {"backend": backend, "workers": workers}),
    ):
        cache = work / f"cache-{len(options)}"
        shutil.copytree(work / "chain-cache", cache)
        server.reset()
        began = time.monotonic()
        flowkit.run(flow, data, output=f"edited-{len(options)}", cache_dir=cache, **options)
        calls = server.stats()["chat_completions"]
        print(
            f"first prompt edited, output unchanged ({rows} rows, 3 calls a row), {name}: "
            f"{calls} model calls, {time.monotonic() - began:.1f} s"
        )


if __name__ == "__main__":
    main()
