"""An object whose ``__call__`` is ``async def`` (or a ``functools.partial`` of one) is awaited,
as a ``--target`` and as a python node's function; never called and left as a coroutine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowkit
from tests.support import REPO, python_flow, read_jsonl, write, write_jsonl

APP = """
import asyncio
import functools

class App:
    async def __call__(self, question, suffix=""):
        await asyncio.sleep(0)
        return {"answer": "Paris" + suffix}

partial_app = functools.partial(App(), suffix="")
"""


@pytest.mark.slow  # a flowkit process
def test_a_partial_of_an_async_callable_object_is_awaited_as_a_target(tmp_path: Path) -> None:
    # (A plain instance of such a class was already awaited; a partial of one was not.)
    name = "partial_app"
    write(tmp_path / "myapp.py", APP)
    write_jsonl(tmp_path / "d.jsonl", [{"question": "capital?", "ground_truth": "Paris"}] * 2)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flowkit.cli",
            "run",
            "exact_match",
            *("--data", "d.jsonl"),
            *("--target", f"myapp:{name}", "--name", "r", "-q"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(tmp_path / "runs" / "r" / "outputs.jsonl")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    metrics = json.loads((tmp_path / "runs" / "r" / "metrics.json").read_text())
    assert metrics["exact_match.mean"] == 1.0


def test_an_async_callable_object_is_awaited_as_a_python_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    module = (
        "import asyncio\n\nclass Double:\n    async def __call__(self, x):\n"
        "        await asyncio.sleep(0)\n        return 2 * x\n\nf = Double()\n"
    )
    flow = python_flow(tmp_path, module)
    write_jsonl(tmp_path / "rows.jsonl", [{"x": 1}, {"x": 4}])
    result = flowkit.run(flow, tmp_path / "rows.jsonl", name="n", use_cache=False)
    assert result.counts["failed"] == 0
    assert [r["outputs"]["y"] for r in read_jsonl(result.run_dir / "outputs.jsonl")] == [2, 8]
