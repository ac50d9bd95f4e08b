"""Large runs stay usable: `show`, `compare`, `report --compare` and `export-otel` over a
python-only run of N rows (the flow of benchmarks/python_only.py), each timed with its peak RSS.

    python benchmarks/large_run.py                      # 1,000,000 rows (a few minutes)
    python benchmarks/large_run.py --rows 100000        # quicker, to iterate
    python benchmarks/large_run.py --trace full         # the run keeps every trace record

Two runs are made (the second from the cache, for `compare`), then each command runs as a user
runs it, `python -m flowkit.cli …` in its own process; its peak RSS comes from wait4(). The
checkout measured is the one `flowkit` is imported from here, so pointing PYTHONPATH at another
checkout measures that one (this is how the README's "before" figures were taken). A --trace
the checkout does not know is left out. Targets: `show` under 1 s, every command under 300 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from python_only import make_data

import flowkit

FLOW = Path(__file__).with_name("python_only.yaml")


def make_run(data: Path, cache: Path, out: Path, trace: str | None) -> float:
    start = time.perf_counter()
    extra = {"trace": trace} if trace else {}
    result = flowkit.run(flowkit.load_flow(FLOW), data, cache_dir=cache, output=out, **extra)
    assert result.status == "completed", result.status
    return time.perf_counter() - start


def measure(cwd: Path, *args: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of `flowkit ARGS` run in ``cwd``, its output thrown away."""
    env = {**os.environ, "PYTHONPATH": str(Path(flowkit.__file__).parent.parent)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (args, err.decode(errors="replace"))
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--trace", default=None, help="the runs' --trace (default: flowkit's)")
    args = parser.parse_args()
    import inspect

    trace = args.trace if "trace" in inspect.signature(flowkit.run).parameters else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data.jsonl"
        make_data(data, args.rows)
        runs = root / "runs"
        cold = make_run(data, root / "cache", runs / "a", trace)
        warm = make_run(data, root / "cache", runs / "b", trace)
        size = (runs / "a" / "traces.jsonl").stat().st_size / 1e6
        print(f"checkout: {Path(flowkit.__file__).parent.parent}")
        print(f"rows: {args.rows:,}; trace: {trace or 'default'}; traces.jsonl {size:,.0f} MB")
        print(f"run: {cold:.1f} s cold, {warm:.1f} s warm")
        commands = {
            "show": ("show", "a"),
            "compare": ("compare", "a", "b"),
            "report --compare": ("report", "a", "--compare", "b", "-o", str(root / "r.html")),
            "export-otel": ("export-otel", "a", "--console"),
        }
        for label, command in commands.items():
            seconds, peak = measure(root, *command)
            print(f"{label}: {seconds:.2f} s, peak RSS {peak:.0f} MB")
            sys.stdout.flush()
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"(this process, which made the runs: peak RSS {own:.0f} MB)")


if __name__ == "__main__":
    main()
