"""Benchmark 2 (llm-bound): an llm flow against a server that answers after a fixed latency.

    python benchmarks/llm_bound.py [--rows 2000] [--latency 0.1] [--concurrency 32 128] [--runs 3]
                                   [--rate-429 0.1 [--retry-after 1]] [--alone-first]

The built-in `groundedness` flow (judge → parse → summary) over N rows, with the cache off, at
each concurrency, against the test server in a child process (so it shares neither the event loop
nor the GIL with the client). Nothing can go faster than concurrency / latency rows per second.
Each run also measures a raw ceiling: a minimal aiohttp client firing the same number of
requests at the same server with the same concurrency. Prints, per concurrency, flowkit's rate
as a fraction of concurrency/latency and of the raw client's own rate, as the median (range)
over the runs, with the CPU flowkit's process spent per row and the machine's load. The figure
is the whole run as a user times it; the rate of the rows phase alone (first row's start to last
row's end, from the traces), its pace after the first quarter of rows ended (once the slow
start is over) and the seconds outside the rows phase (start-up, aggregates) say where the
rest went. After each run the same run is made again over the first one's cache folder, where
flowkit keeps what the endpoint took (``flowkit.llm.memory``), as a user's next run on the same
endpoint does, and that figure is printed apart. Every run is a first contact and opens at its
full concurrency (no headers are expected from a local server); ``--alone-first`` sets
``slow_start: true`` (one request alone until the first reply, as for OpenAI's and Azure's
hosts) to show what that costs. ``--rate-429 0.1`` has the server answer 10% of requests with a
scattered 429 (Retry-After 0), as issue 31's fault case; ``--retry-after 1`` has each ask for a
second's pause instead (its review's case: a client that waits out each 429 for its own request
alone is the raw client's figure). Targets: c=32 >= 0.90 of the limit;
c=128 >= 0.75 of the limit and >= 0.90 of the raw client. Issue 31's first-contact figures:
``--rows 200 --latency 0.2 --concurrency 16 32`` (>= 0.85 of the limit, >= 0.95 of the raw
client) and the same with ``--rate-429 0.1`` (>= 0.80).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import load_average, raw_ceiling, spread, timed_groundedness, write_rows

from flowkit.testing.server import ServerConfig, serve_subprocess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--alone-first",
        action="store_true",
        help="the connection sets slow_start: true: one request alone until the first reply",
    )
    parser.add_argument("--rate-429", type=float, default=0.0, help="share of scattered 429s")
    parser.add_argument(
        "--retry-after", type=float, default=0.0, help="seconds each scattered 429 asks to wait"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_rows(root / "rows.jsonl", args.rows)
        config = ServerConfig(
            latency=args.latency, rate_429=args.rate_429, retry_after=args.retry_after
        )
        with serve_subprocess(config) as srv:
            for concurrency in args.concurrency:
                limit = concurrency / args.latency
                opening = {"slow_start": True} if args.alone_first else {}
                of_limit, of_raw, raws, cpu, in_rows, overhead = [], [], [], [], [], []
                steady: list[float] = []
                remembered: list[float] = []
                remembered_raw: list[float] = []
                for run in range(args.runs):
                    raw = raw_ceiling(srv.base_url, args.rows, concurrency)
                    srv.reset()
                    cpu_start = time.process_time()  # this process only: not the server's
                    elapsed, rows_phase, pace = timed_groundedness(
                        data,
                        args.rows,
                        root / f"c{concurrency}-{run}",
                        srv.base_url,
                        concurrency,
                        max_retries=10,
                        **opening,
                    )
                    cpu.append((time.process_time() - cpu_start) / args.rows * 1000)
                    assert srv.stats()["by_status"].get("200") == args.rows
                    rate = args.rows / elapsed
                    of_limit.append(rate / limit)
                    of_raw.append(rate / raw)
                    raws.append(raw / limit)
                    in_rows.append(args.rows / rows_phase / limit)
                    steady.append(pace / limit)
                    overhead.append(elapsed - rows_phase)
                    # The same run again over the first one's cache folder: the endpoint opens
                    # where the first run left off (flowkit.llm.memory), as a user's next run.
                    srv.reset()
                    again, _, _ = timed_groundedness(
                        data,
                        args.rows,
                        root / f"c{concurrency}-{run}-again",
                        srv.base_url,
                        concurrency,
                        cache_dir=root / f"c{concurrency}-{run}" / "cache",
                        max_retries=10,
                        **opening,
                    )
                    remembered.append(args.rows / again / limit)
                    remembered_raw.append(args.rows / again / raw)
                declared = ", slow_start: true" if args.alone_first else ""
                if args.rate_429:
                    declared += f", {args.rate_429:.0%} 429s"
                    if args.retry_after:
                        declared += f" (Retry-After {args.retry_after:g})"
                print(
                    f"llm-bound c={concurrency}{declared} latency={args.latency}s "
                    f"rows={args.rows}: "
                    f"flowkit/limit {spread(of_limit)}, flowkit/raw {spread(of_raw)}, "
                    f"raw/limit {spread(raws)} over {args.runs} runs; rows phase alone "
                    f"{spread(in_rows)} of the limit, after the first quarter of rows "
                    f"{spread(steady)}, a second run remembering the endpoint "
                    f"{spread(remembered)} of the limit ({spread(remembered_raw)} of the raw "
                    f"client), start and end "
                    f"{statistics.median(overhead):.2f} s; cpu/row "
                    f"{statistics.median(cpu):.2f} ms; {load_average()}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
