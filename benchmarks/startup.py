"""Start-up: how long `flowkit --help`, a one-row python-only `flowkit run f1_score`, a one-row
llm `flowkit run groundedness` (against flowkit's local test server, started here) and its
rerun served from the cache take, as a user's shell sees them (a fresh process each time, wall
clock).

    python benchmarks/startup.py [--repeat 7] [--before PATH]

Prints the best and the median of the repeats for each command (wall clock, and the CPU time
the process used, which another job's load inflates less), then the figure issue 31 asks for:
how much later the llm run ends than the python-only one, as the median (and range) over the
repeats of each repeat's difference (the commands of a repeat run one after the other, so both
sides of a difference see the same load), with the machine's load average over the
measurement; then whether the targets hold (`--help` < 0.3 s, the one-row run < 0.5 s, the llm
run within 0.3 s of the python one) and which model libraries the python-only run and the
cached llm rerun imported (none should be). With `--before PATH` (a folder holding another
version's `flowkit/` package), every command also runs with that code, right after this
code's, so both sides see the same load. With `--instructions`, each run command also runs once
under valgrind's cachegrind, which counts the instructions the process executed: a figure the
machine's load does not move (repeatable to 0.01%, hash seed fixed), for comparing versions on
a busy machine; the wall and CPU figures remain the ones the targets are about.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowkit.testing.server import serve

ROOT = Path(__file__).resolve().parents[1]
VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
MODEL_LIBRARIES = ("openai", "httpx", "aiohttp", "networkx", "pandas")


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh process running ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def instructions(args: list[str], cwd: Path, env: dict[str, str]) -> int:
    """How many instructions one fresh process running ``args`` executed (valgrind)."""
    done = subprocess.run(
        [*VALGRIND, *args],
        cwd=cwd,
        env={**env, "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr}")
    return int(found[1].replace(",", ""))


def report(label: str, runs: list[tuple[float, float]]) -> tuple[float, float]:
    """Print the best and median wall and CPU time of ``runs``; the best of each."""
    walls, cpus = sorted(w for w, _ in runs), sorted(c for _, c in runs)
    print(
        f"{label}: best {walls[0]:.3f} s, median {statistics.median(walls):.3f} s "
        f"(CPU best {cpus[0]:.3f} s, median {statistics.median(cpus):.3f} s)"
    )
    return walls[0], cpus[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", type=Path, help="a folder with another flowkit/ to compare")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind)"
    )
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve() as server:
        work = Path(tmp)
        (work / "one.jsonl").write_text(json.dumps({"answer": "Paris", "ground_truth": "Paris"}))
        qa = (ROOT / "examples" / "qa.jsonl").read_text().splitlines()[0]
        (work / "qa.jsonl").write_text(qa + "\n")
        env = {**os.environ, "FLOWKIT_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-local")
        env["FLOWKIT_MODEL"] = "flowkit-test"
        # As an installed package runs: with bytecode cached (an installed wheel has its .pyc;
        # a checkout writes them on first use, unless PYTHONDONTWRITEBYTECODE says not to).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        flowkit = [sys.executable, "-m", "flowkit.cli"]
        run = [*flowkit, "run", "f1_score", "--data", "one.jsonl", "-q", "--no-cache"]
        llm = [*flowkit, "run", "groundedness", "--data", "qa.jsonl", "-q"]
        sides = {"": env}
        if opts.before is not None:
            old = {**env, "PYTHONPATH": str(opts.before.resolve())}
            old["FLOWKIT_CACHE_DIR"] = str(work / "cache-before")
            sides = {"before: ": old, "": env}
        for side in sides.values():
            timed(run, work, side)  # warm the file cache and write the bytecode
            timed(llm, work, side)  # and fill the cache the rerun reads
        run_label, llm_label = "one-row f1_score run", "one-row llm groundedness run"
        commands = {
            "flowkit --help": [*flowkit, "--help"],
            run_label: run,
            llm_label: [*llm, "--no-cache"],
            "its rerun, served from the cache": llm,
        }
        runs: dict[str, list[tuple[float, float]]] = {
            name + label: [] for name in sides for label in commands
        }
        loads: list[float] = []
        for _ in range(opts.repeat):
            loads.append(os.getloadavg()[0])
            for label, args in commands.items():
                for name, side in sides.items():
                    runs[name + label].append(timed(args, work, side))
        loads.append(os.getloadavg()[0])
        best = {key: report(key, value) for key, value in runs.items()}
        print(f"load average (1 min) over the measurement: {min(loads):.2f}-{max(loads):.2f}")
        gaps: dict[str, list[float]] = {}
        for name in sides:
            pairs = list(zip(runs[name + run_label], runs[name + llm_label], strict=True))
            gaps[name] = walls = [llm_run[0] - python_run[0] for python_run, llm_run in pairs]
            cpus = [llm_run[1] - python_run[1] for python_run, llm_run in pairs]
            print(
                f"{name}llm run minus python run, median of {len(walls)} interleaved repeats: "
                f"{statistics.median(walls):.3f} s (range {min(walls):.3f}-{max(walls):.3f} s; "
                f"CPU {statistics.median(cpus):.3f} s, range {min(cpus):.3f}-{max(cpus):.3f} s)"
            )
        if opts.instructions:
            counted = {run_label: run, llm_label: [*llm, "--no-cache"], "cached rerun": llm}
            for name, side in sides.items():
                count = {label: instructions(args, work, side) for label, args in counted.items()}
                for label, value in count.items():
                    print(f"{name}{label}: {value / 1e9:.3f} G instructions")
                gap = count[llm_label] - count[run_label]
                print(f"{name}llm run minus python run: {gap / 1e9:.3f} G instructions")
        for label, value, target in (
            ("flowkit --help", best["flowkit --help"][0], 0.3),
            ("one-row f1_score run", best[run_label][0], 0.5),
            ("llm run minus python run (median)", statistics.median(gaps[""]), 0.3),
        ):
            verdict = "met" if value < target else "MISSED"
            print(f"{label}: {value:.3f} s (target < {target} s: {verdict})")
        probe = (
            "import runpy, sys; sys.argv = ['flowkit', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('flowkit.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(m for m in {MODEL_LIBRARIES!r} if m in sys.modules), file=sys.stderr)"
        )
        for label, args in (("one-row f1_score run", run), ("cached llm rerun", llm)):
            out = subprocess.run(
                [sys.executable, "-c", probe, *args[3:]],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            print(f"libraries the {label} imported: {out.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
