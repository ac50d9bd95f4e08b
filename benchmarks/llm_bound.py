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
import tempfile
from pathlib import Path

from common import timed_groundedness, write_rows

from flowkit.testing.server import ServerConfig, serve_subprocess

TARGET = 0.90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128])
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_rows(root / "rows.jsonl", args.rows)
        with serve_subprocess(ServerConfig(latency=args.latency)) as srv:
            for concurrency in args.concurrency:
                srv.reset()
                elapsed = timed_groundedness(
                    data,
                    args.rows,
                    root / f"c{concurrency}",
                    srv.base_url,
                    concurrency,
                    max_retries=2,
                )
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
