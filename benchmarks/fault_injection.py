"""Fault injection: a judged flow against an endpoint that fails often, killed with SIGKILL half
way (once half the rows' judges have answered, read from the traces), then resumed. Prints
rows, faults injected, rows completed and rows lost (must be 0), and whether the scores equal a
fault-free, uninterrupted run's.

    python benchmarks/fault_injection.py [--rows 1000] [--kill-after 0.5]

The server runs in a child process (python -m flowkit.testing) with 15% 429s, 5% 500s and 2%
timeouts; flowkit runs as `flowkit run` in another, so the kill is a real kill -9.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flowkit.testing.server import ServerConfig, serve_subprocess

FLOW = "groundedness"


def write_inputs(folder: Path, rows: int, base_url: str) -> None:
    with open(folder / "rows.jsonl", "w") as f:
        for i in range(rows):
            row = {"question": f"q{i}", "context": f"Fact {i} is true.", "answer": f"Fact {i}."}
            f.write(json.dumps(row) + "\n")
    (folder / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "connections:\n"
        f"  local: {{base_url: '{base_url}', api_key: sk-local, concurrency: 32, timeout: 1.0,"
        " max_retries: 10, backoff_base: 0.01, backoff_max: 0.1}\n"
    )


def flowkit(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"flowkit exited {proc.returncode}:\n{out}\n{err}")


def records(path: Path) -> list[dict[str, Any]]:
    rows = []
    for raw in path.read_bytes().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(raw))
        except ValueError:
            continue  # a line the kill cut short
    return rows


def outputs(run_dir: Path) -> list[dict[str, Any]]:
    return records(run_dir / "outputs.jsonl")


def judged(run_dir: Path) -> int:
    """Rows whose judge has answered, from the traces: they are written as nodes finish, while
    outputs.jsonl keeps input order and so waits for a slow row's retries."""
    return len({r.get("line") for r in records(run_dir / "traces.jsonl") if r.get("node")})


def scores(run_dir: Path) -> dict[int, Any]:
    return {r["line"]: (r.get("outputs") or {}).get("score") for r in outputs(run_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--kill-after", type=float, default=0.5, help="fraction of rows")
    args = parser.parse_args()
    common = ["--connection", "local", "--no-cache", "-q"]

    with tempfile.TemporaryDirectory() as tmp:
        clean_dir, faulty_dir = Path(tmp, "clean"), Path(tmp, "faulty")
        clean_dir.mkdir()
        faulty_dir.mkdir()
        with serve_subprocess(ServerConfig(latency=0.01)) as clean_server:
            write_inputs(clean_dir, args.rows, clean_server.base_url)
            finish(flowkit(clean_dir, "run", FLOW, "--data", "rows.jsonl", "--name", "r", *common))

        faults = ServerConfig(
            latency=0.01,
            rate_429=0.15,
            rate_500=0.05,
            rate_timeout=0.02,
            retry_after=0.0,
            timeout_delay=5.0,
            seed=7,
        )
        with serve_subprocess(faults) as server:
            write_inputs(faulty_dir, args.rows, server.base_url)
            run_dir = faulty_dir / "runs" / "r"
            t0 = time.monotonic()
            proc = flowkit(faulty_dir, "run", FLOW, "--data", "rows.jsonl", "--name", "r", *common)
            target = int(args.rows * args.kill_after)
            while proc.poll() is None:
                if judged(run_dir) >= target:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
            before_kill = len(outputs(run_dir))
            judged_at_kill = judged(run_dir)
            status_after_kill = json.loads((run_dir / "run.json").read_text())["status"]
            finish(flowkit(faulty_dir, "run", "--resume", "r", "-q"))
            elapsed = time.monotonic() - t0
            stats = server.stats()

        final = outputs(run_dir)
        lines = [r["line"] for r in final]
        completed = sum(r["status"] == "ok" for r in final)
        lost = args.rows - len(set(lines))
        same = scores(run_dir) == scores(clean_dir / "runs" / "r")
        info = json.loads((run_dir / "run.json").read_text())
        injected = stats["faults"]
        print(f"rows:              {args.rows}")
        print(f"requests:          {stats['requests']} ({elapsed:.1f} s, both processes)")
        print(f"faults injected:   {sum(injected.values())} {json.dumps(injected)}")
        print(
            f"killed (-9) after: {judged_at_kill} rows judged, {before_kill} of them in "
            f"outputs.jsonl (input order); run.json then said {status_after_kill!r}"
        )
        duplicates = len(lines) - len(set(lines))
        print(f"after resume:      status {info['status']!r}, duplicate rows {duplicates}")
        print(f"scores equal a fault-free uninterrupted run: {same}")
        print(f"rows completed {completed}/{args.rows}, rows lost {lost}")
        if lost or not same or completed != args.rows:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
