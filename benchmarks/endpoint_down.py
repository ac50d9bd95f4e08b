"""Benchmark (endpoint down): `flowkit run` against an endpoint that refuses every call.

    python benchmarks/endpoint_down.py [--rows 2000] [--runs 3]

Two cases, each as a user runs it (`flowkit run` in a child process, --concurrency 32): a wrong
API key (the test server answers 401) and a port nothing listens on (connection refused). Prints
the seconds until the command exits (interpreter start included), its exit code, how many
`error:` lines it printed, and for the 401 case how many requests reached the server; median
(range) over the runs with the machine's load. Target: stops within 10 s, one error, exit != 0.
The ceiling to compare with is a client that gives up after its first failure: one round trip.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import load_average, spread, write_rows

from flowkit.testing.server import ServerConfig, serve_subprocess


def project(folder: Path, base_url: str, rows: int, key: str) -> Path:
    folder.mkdir()
    write_rows(folder / "rows.jsonl", rows)
    connection = {"base_url": base_url, "api_key": key}
    (folder / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {json.dumps(connection)}\n"
    )
    return folder


def flowkit_run(folder: Path) -> tuple[float, int, int, str]:
    """(seconds, exit code, number of error lines, the first one) of one `flowkit run`."""
    args = ["run", "groundedness", "--data", "rows.jsonl", "--concurrency", "32", "--no-cache"]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flowkit.cli", *args, "-q"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return elapsed, done.returncode, len(errors), errors[0] if errors else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections to it are refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for case in ("401", "refused"):
            times, codes, counts, requests, first = [], set(), set(), [], ""
            for run in range(args.runs):
                if case == "401":
                    with serve_subprocess(ServerConfig(api_key="the-right-key-1234")) as srv:
                        folder = project(root / f"{case}-{run}", srv.base_url, args.rows, "wrong-1")
                        elapsed, code, count, first = flowkit_run(folder)
                        requests.append(srv.stats()["requests"])
                else:
                    url = f"http://127.0.0.1:{free_port()}/v1"
                    folder = project(root / f"{case}-{run}", url, args.rows, "any-key-1")
                    elapsed, code, count, first = flowkit_run(folder)
                times.append(elapsed)
                codes.add(code)
                counts.add(count)
            reached = f", requests reaching the server {requests}" if requests else ""
            print(
                f"endpoint down ({case}) rows={args.rows}: stopped after {spread(times)} s, "
                f"exit codes {sorted(codes)}, error lines {sorted(counts)}{reached} over "
                f"{args.runs} runs; {load_average()}\n  {first}",
                flush=True,
            )


if __name__ == "__main__":
    main()
