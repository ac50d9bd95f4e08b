"""Large runs stay usable: `show`, `compare`, `report --compare` and `export-otel` over a
python-only run of N rows (the flow of benchmarks/python_only.py), each timed with its peak RSS.

    python benchmarks/large_run.py                      # 1,000,000 rows (many minutes)
    python benchmarks/large_run.py --rows 100000        # quicker, to iterate
    python benchmarks/large_run.py --trace full         # the runs keep every trace record

Everything runs as a user runs it, `python -m flowkit.cli …` in a process of its own: two runs
(the second from the cache, for `compare`), then each command, its peak RSS from wait4(). This
script itself imports no flowkit and stays small, because a child's peak RSS counts the parent's
memory it was forked from. The checkout measured is the one `flowkit` is found in (PYTHONPATH
pointing at another checkout measures that one: this is how the README's "before" figures were
taken); a --trace that checkout does not know is left out. Targets: `show` under 1 s, every
command under 300 MB.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOW = Path(__file__).with_name("python_only.yaml")


def checkout() -> Path:
    spec = importlib.util.find_spec("flowkit")
    assert spec is not None and spec.origin is not None, "flowkit is not importable"
    return Path(spec.origin).parent.parent


def flowkit(cwd: Path, *args: str) -> tuple[float, float, str]:
    """Seconds, peak RSS (MB) and stderr of `flowkit ARGS` run in ``cwd``, stdout thrown away."""
    env = {**os.environ, "PYTHONPATH": str(checkout())}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (args, err)
    return elapsed, usage.ru_maxrss / 1024, err


def knows_trace() -> bool:
    return (
        "--trace"
        in subprocess.run(
            [sys.executable, "-m", "flowkit.cli", "run", "--help"],
            env={**os.environ, "PYTHONPATH": str(checkout())},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--trace", default=None, help="the runs' --trace (default: flowkit's)")
    args = parser.parse_args()
    trace = ("--trace", args.trace) if args.trace and knows_trace() else ()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # The rows of benchmarks/python_only.py, written by a child so flowkit stays out of here.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, pathlib, python_only as p; "
                "p.make_data(pathlib.Path(sys.argv[1]), int(sys.argv[2]))",
                str(root / "data.jsonl"),
                str(args.rows),
            ],
            cwd=Path(__file__).parent,
            env={**os.environ, "PYTHONPATH": str(checkout())},
            check=True,
        )
        run = ("run", str(FLOW), "--data", "data.jsonl", "--cache-dir", "cache", "-q", *trace)
        cold, cold_rss, _ = flowkit(root, *run, "--output", "runs/a")
        warm, warm_rss, _ = flowkit(root, *run, "--output", "runs/b")
        size = (root / "runs" / "a" / "traces.jsonl").stat().st_size / 1e6
        print(f"checkout: {checkout()}")
        print(f"rows: {args.rows:,}; trace: {args.trace or 'default'}; traces.jsonl {size:,.0f} MB")
        print(f"run: {cold:.1f} s cold ({cold_rss:.0f} MB), {warm:.1f} s warm ({warm_rss:.0f} MB)")
        commands = {
            "show": ("show", "a"),
            "compare": ("compare", "a", "b"),
            "report --compare": ("report", "a", "--compare", "b", "-o", "r.html"),
            "export-otel": ("export-otel", "a", "--console"),
        }
        for label, command in commands.items():
            seconds, peak, _ = flowkit(root, *command)
            print(f"{label}: {seconds:.2f} s, peak RSS {peak:.0f} MB")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
