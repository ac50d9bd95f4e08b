"""Benchmark: the garbage collector's setting while rows run, against Python's defaults.

    python benchmarks/gc_garbage.py [--rows 4000] [--garbage-kib 512]

Each setting runs in a child process of its own (peak RSS is per process): a python-only flow
whose node leaves ``--garbage-kib`` of cyclic garbage per row (a list holding itself and a
buffer, as an exception's traceback or a parsed tree holding its parent can), and, for speed,
the same flow over rows that leave none. Prints peak RSS and rows/s for:

- ``python``: Python's own collector settings (flowkit's left out);
- ``flowkit``: the setting runs use (``flowkit.engine.collector``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import nullcontext
from pathlib import Path

import flowkit
from flowkit.engine import executor

NODE = textwrap.dedent(
    """
    def f(x, kib):
        if kib:
            junk = [bytearray(kib * 1024)]
            junk.append(junk)  # a cycle: only the collector frees it
        words = [str(i) for i in range(50)]  # what a row's work allocates and frees
        return {"n": len(words), "x": x}
    """
)
FLOW = textwrap.dedent(
    """
    name: garbage
    inputs: {x: {type: integer}, kib: {type: integer}}
    outputs: {y: ${n.output}}
    nodes:
      - {name: n, type: python, source: node.py, function: f,
         inputs: {x: ${inputs.x}, kib: ${inputs.kib}}}
    """
)


def child(setting: str, rows: int, kib: int) -> dict[str, float]:
    """One run in this process under ``setting``; its figures."""
    if setting == "python":
        executor.fewer_collections = nullcontext  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "node.py").write_text(NODE)
        (folder / "flow.yaml").write_text(FLOW)
        data = folder / "rows.jsonl"
        data.write_text("".join(json.dumps({"x": i, "kib": kib}) + "\n" for i in range(rows)))
        start = time.perf_counter()
        flowkit.run(folder / "flow.yaml", data, use_cache=False, output=folder / "run")
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"peak_mb": round(peak, 1), "rows_per_s": round(rows / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--garbage-kib", type=int, default=512)
    parser.add_argument("--child", choices=["python", "flowkit"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.garbage_kib)))
        return

    def measure(setting: str, kib: int) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--child", setting, "--rows", str(args.rows)]
        done = subprocess.run(
            [*cmd, "--garbage-kib", str(kib)], capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout.splitlines()[-1])

    print(f"{args.rows} rows; garbage: {args.garbage_kib} KiB of cycles a row")
    for setting in ("python", "flowkit"):
        garbage, clean = measure(setting, args.garbage_kib), measure(setting, 0)
        print(
            f"{setting:8} with garbage: peak {garbage['peak_mb']:8.1f} MB, "
            f"{garbage['rows_per_s']:8.1f} rows/s | without: peak {clean['peak_mb']:7.1f} MB, "
            f"{clean['rows_per_s']:8.1f} rows/s"
        )


if __name__ == "__main__":
    main()
