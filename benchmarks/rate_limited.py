"""Benchmark 3 (rate-limited): an llm flow against a server that allows RPM requests a minute.

    python benchmarks/rate_limited.py [--rows 1000] [--rpm 600] [--told | --untold]

Two ways to meet a limit: the connection is told the limit (`rpm:` in flowkit.yaml, so the
scheduler spaces requests), or it is not told and must find it from the server's 429s and
Retry-After. Prints, for each, the achieved rate (successful requests per minute over the whole
run) divided by the limit, and the fraction of requests rejected. The server's sliding window
starts empty and admits a first burst, so a run that finds the limit can exceed 1.0.
Targets: rate >= 0.90 of the limit, rejected < 10%.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import timed_groundedness, write_rows

from flowkit.testing.server import ServerConfig, serve_subprocess


def run_variant(rows: int, rpm: int, told: bool, root: Path) -> tuple[float, float, float]:
    data = write_rows(root / "rows.jsonl", rows)
    with serve_subprocess(ServerConfig(rpm=rpm, latency=0.05)) as srv:
        folder = root / ("told" if told else "untold")
        limit = {"rpm": rpm} if told else {}
        elapsed = timed_groundedness(data, rows, folder, srv.base_url, 32, max_retries=50, **limit)
        stats = srv.stats()
    ok = stats["by_status"].get("200", 0)
    rejected = stats["by_status"].get("429", 0) / max(1, stats["requests"])
    ratio = ok / elapsed * 60.0 / rpm
    return ratio, rejected, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rpm", type=int, default=600)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--told", action="store_true", help="only the variant told the limit")
    group.add_argument("--untold", action="store_true", help="only the adaptive variant")
    args = parser.parse_args()
    variants = [True] if args.told else [False] if args.untold else [True, False]
    for told in variants:
        with tempfile.TemporaryDirectory() as tmp:
            ratio, rejected, elapsed = run_variant(args.rows, args.rpm, told, Path(tmp))
        name = "told rpm" if told else "adaptive"
        print(
            f"{name}: {args.rows} rows in {elapsed:.1f} s; achieved/limit {ratio:.2f} "
            f"(target >= 0.90), rejected {rejected:.1%} (target < 10%)",
            flush=True,
        )


if __name__ == "__main__":
    main()
