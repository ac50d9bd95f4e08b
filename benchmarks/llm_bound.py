"""Benchmark 2 (llm-bound): an llm flow against a server that answers after a fixed latency.

    python benchmarks/llm_bound.py [--rows 2000] [--latency 0.1] [--concurrency 8 32 128]

The built-in `groundedness` flow (judge → parse → summary) over N rows, with the cache off, at
each concurrency. The test server runs in a child process so it shares neither the event loop
nor the GIL with the client. Nothing can go faster than concurrency / latency rows per second
(8 → 80/s at 100 ms); the figure is the achieved rate divided by that limit. Target: >= 0.90 at
every concurrency up to 128. A machine with few cores caps the highest concurrencies: the openai
client's own cost per request (building it, httpx, parsing the reply) is CPU time, and the
server's replies are too when it shares the cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import flowkit
from flowkit.llm import load_settings, reset_schedulers
from flowkit.testing.server import ServerConfig, serve_subprocess

TARGET = 0.90


def make_data(path: Path, rows: int) -> None:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"context": f"Fact {i}.", "answer": f"Answer {i}."}) + "\n")


def run_at(concurrency: int, rows: int, base_url: str, root: Path) -> float:
    """Seconds to run ``rows`` rows at ``concurrency``."""
    folder = root / f"c{concurrency}"
    folder.mkdir()
    # The connection's own in-flight limit must not be the bottleneck being measured.
    (folder / "flowkit.yaml").write_text(
        "default_model: flowkit-test\nconnections:\n"
        f"  local: {{base_url: '{base_url}', concurrency: {concurrency}, max_retries: 2}}\n"
    )
    reset_schedulers()
    start = time.perf_counter()
    result = flowkit.run(
        "groundedness",
        root / "rows.jsonl",
        settings=load_settings(folder, env={}),
        use_cache=False,
        concurrency=concurrency,
        output=folder / "run",
    )
    elapsed = time.perf_counter() - start
    assert result.counts["succeeded"] == rows, result.counts
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128])
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_data(root / "rows.jsonl", args.rows)
        with serve_subprocess(ServerConfig(latency=args.latency)) as srv:
            for concurrency in args.concurrency:
                srv.reset()
                elapsed = run_at(concurrency, args.rows, srv.base_url, root)
                requests = srv.stats()["chat_completions"]
                assert requests == args.rows, (requests, args.rows)
                rate = args.rows / elapsed
                limit = concurrency / args.latency
                ratios.append(rate / limit)
                print(
                    f"concurrency {concurrency}: {rate:,.0f} rows/s of a limit of {limit:,.0f} "
                    f"rows/s = {rate / limit:.2f} (target >= {TARGET:.2f})",
                    flush=True,
                )
    worst = min(range(len(ratios)), key=ratios.__getitem__)
    print(
        f"llm-bound: worst achieved/limit {ratios[worst]:.2f} at concurrency "
        f"{args.concurrency[worst]} (target >= {TARGET:.2f} up to 128)",
        flush=True,
    )


if __name__ == "__main__":
    main()
