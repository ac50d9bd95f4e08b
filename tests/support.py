"""Small helpers shared by the engine tests: writing flows and data, reading run folders,
starting `flowkit` as a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "flows"
EXAMPLES = REPO / "examples"


def write(path: Path, text: str) -> Path:
    """Write dedented ``text`` (creating folders); return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def python_flow(
    folder: Path, module: str, aggregate: str | None = None, *, node: str = "a"
) -> Path:
    """Write flow ``t`` to folder/t.yaml and ``module`` to folder/m.py: a python node ``n`` (m.py's
    ``f(x)`` on input ``x``, output ``y``) and, given ``aggregate``, an aggregate node ``node``
    calling m.py's ``aggregate(ys)`` over n's outputs."""
    nodes = "  - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}\n"
    if aggregate is not None:
        nodes += (
            f"  - {{name: {node}, type: aggregate, source: m.py, function: {aggregate}, "
            "inputs: {ys: ${n.output}}}\n"
        )
    write(folder / "m.py", module)
    return write(
        folder / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\noutputs: {y: ${n.output}}\nnodes:\n" + nodes,
    )


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def start_flowkit(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """`flowkit ARGS` as a real process in ``cwd``, with ``env`` added to this environment and
    this checkout's flowkit first on its path; stdout and stderr are captured as text."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A process started with SIGINT ignored (as a background job is) keeps ignoring it, and
        # the tests that send Ctrl-C need Python's KeyboardInterrupt: give the child the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def traces_by(records: Iterable[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    """Trace records keyed by (line, node)."""
    return {(r["line"], r["node"]): r for r in records}


def span(records: Iterable[dict[str, Any]]) -> float:
    """Seconds from the first record's start to the last one's end."""
    items = list(records)
    return max(r["end"] for r in items) - min(r["start"] for r in items)


def max_overlap(records: Iterable[dict[str, Any]]) -> int:
    """The most records whose [start, end) intervals overlap at one moment."""
    items = list(records)
    events = sorted([(r["start"], 1) for r in items] + [(r["end"], -1) for r in items])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def run_builtin(flow: str, data: Path, tmp: Path, **kwargs: Any) -> Any:
    """Run a built-in flow from flows/ into a fresh folder under ``tmp``, with ``tmp/cache``."""
    import flowkit

    out = tmp / f"run-{flow}-{len(list(tmp.glob('run-*')))}"
    return flowkit.run(
        REPO / "flows" / f"{flow}.yaml", data, cache_dir=tmp / "cache", output=out, **kwargs
    )
