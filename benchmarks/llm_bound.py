"""Benchmark 2 (llm-bound): an llm flow against a server that answers after a fixed latency.

    python benchmarks/llm_bound.py [--rows 2000] [--latency 0.1] [--concurrency 32 128] [--runs 3]
                                   [--no-slow-start]

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
flowkit keeps what the endpoint took (``flowkit.llm.memory``): it opens at the window the first
run reached, as a user's next run on the same endpoint does, and that figure is printed apart.
With ``--no-slow-start`` the connection declares the server free of rate limits
(``slow_start: false``), so the run opens at full concurrency. Targets: c=32 >= 0.90 of the
limit; c=128 >= 0.75 of the limit and >= 0.90 of the raw client.
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
        "--no-slow-start",
        action="store_true",
        help="the connection sets slow_start: false, as for a self-hosted judge without limits",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_rows(root / "rows.jsonl", args.rows)
        with serve_subprocess(ServerConfig(latency=args.latency)) as srv:
            for concurrency in args.concurrency:
                limit = concurrency / args.latency
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
                        max_retries=2,
                        slow_start=not args.no_slow_start,
                    )
                    cpu.append((time.process_time() - cpu_start) / args.rows * 1000)
                    assert srv.stats()["chat_completions"] == args.rows
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
                        max_retries=2,
                        slow_start=not args.no_slow_start,
                    )
                    remembered.append(args.rows / again / limit)
                    remembered_raw.append(args.rows / again / raw)
                declared = ", slow_start: false" if args.no_slow_start else ""
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
