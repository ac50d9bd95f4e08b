"""Start-up: how long `flowkit --help` and a one-row python-only `flowkit run f1_score` take,
as a user's shell sees them (a fresh process each time, wall clock).

    python benchmarks/startup.py [--repeat 7]

Prints the best and the median of the repeats for each command, then whether the targets hold
(`--help` < 0.3 s, the one-row run < 0.5 s), and which model libraries the run imported (none
should be: the flow has no llm node). The best run is the figure: the machine's other jobs
only ever add to it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_LIBRARIES = ("openai", "httpx", "aiohttp", "networkx", "pandas")


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "one.jsonl").write_text(json.dumps({"answer": "Paris", "ground_truth": "Paris"}))
        env = {**os.environ, "FLOWKIT_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}
        # As an installed package runs: with bytecode cached (an installed wheel has its .pyc;
        # a checkout writes them on first use, unless PYTHONDONTWRITEBYTECODE says not to).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        flowkit = [sys.executable, "-m", "flowkit.cli"]
        run = [*flowkit, "run", "f1_score", "--data", "one.jsonl", "-q", "--no-cache"]
        timed(run, work, env)  # warm the file cache and write the bytecode
        commands = {"flowkit --help": [*flowkit, "--help"], "one-row f1_score run": run}
        targets = {"flowkit --help": 0.3, "one-row f1_score run": 0.5}
        for label, args in commands.items():
            times = sorted(timed(args, work, env) for _ in range(opts.repeat))
            best, median = times[0], statistics.median(times)
            verdict = "met" if best < targets[label] else "MISSED"
            print(
                f"{label}: best {best:.3f} s, median {median:.3f} s "
                f"(target < {targets[label]} s: {verdict})"
            )
        probe = (
            "import runpy, sys; sys.argv = ['flowkit', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('flowkit.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(m for m in {MODEL_LIBRARIES!r} if m in sys.modules), file=sys.stderr)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe, *run[3:]],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        print(f"libraries the one-row run imported: {out.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
