"""Runs side by side: two processes sharing one cache, and reading a run while it is written.

Both use real `flowkit` processes, since the point is what several processes do to the same
files. The flows' python node sleeps a little so that the runs truly overlap.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from flowkit.cache.store import Cache, node_key
from flowkit.flow.loader import load_flow
from tests.support import read_json, read_jsonl, start_flowkit, write, write_jsonl

ROWS = 300


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(
        tmp_path / "nodes.py",
        """
        import os
        import time

        def square(x):
            time.sleep(float(os.environ.get("NAP", "0")))
            return {"square": x * x}
        """,
    )
    write(
        tmp_path / "slow.yaml",
        """
        name: slow
        inputs: {x: {type: integer}}
        outputs: {y: ${sq.output.square}}
        nodes:
          - {name: sq, type: python, source: nodes.py, function: square, inputs: {x: ${inputs.x}}}
          - {name: total, type: aggregate, function: flowkit.metrics.aggregate:sums,
             inputs: {values: ${sq.output.square}}}
        """,
    )
    write_jsonl(tmp_path / "data.jsonl", [{"x": i} for i in range(ROWS)])
    return tmp_path


def flowkit(project: Path, *args: str, nap: float = 0.0) -> subprocess.Popen[str]:
    return start_flowkit(project, *args, env={"NAP": str(nap)})


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


@pytest.mark.slow
def test_two_runs_share_one_cache_without_corrupting_it(project: Path) -> None:
    cache = project / "shared-cache"
    common = ("run", "slow.yaml", "--data", "data.jsonl", "--cache-dir", str(cache), "-q")
    # Each run takes a few cache flushes (one a second), while the other process writes too.
    procs = [
        flowkit(project, *common, "--name", name, "--concurrency", "32", nap=0.03)
        for name in ("a", "b")
    ]
    for proc in procs:
        code, out = finish(proc)
        assert code == 0, out
        assert "Traceback" not in out and "locked" not in out
        assert f"rows {ROWS}: {ROWS} ok, 0 failed" in out

    for name in ("a", "b"):
        run = project / "runs" / name
        assert read_json(run / "run.json")["status"] == "completed"
        rows = read_jsonl(run / "outputs.jsonl")
        assert [(r["line"], r["outputs"]["y"]) for r in rows] == [(i, i * i) for i in range(ROWS)]
        total = sum(i * i for i in range(ROWS))
        assert read_json(run / "metrics.json") == {
            "slow.values.sum": total,
            "slow.values.mean": pytest.approx(total / ROWS),
        }

    db = sqlite3.connect(cache / "cache.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    # Both processes computed the same keys; whichever wrote an entry, it is there, and right.
    node = load_flow(project / "slow.yaml").nodes["sq"]
    store = Cache(cache)
    try:
        for x in range(ROWS):
            assert store.get(node_key(node.static_key, {"x": x})) == ({"square": x * x}, None)
        # Plus the aggregate's result, once per run at most: its inputs list the rows in the
        # order they finished, so two runs rarely share its key.
        assert ROWS < store.count() <= ROWS + 2
    finally:
        store.close()

    # A third run reads everything back from the shared cache.
    code, out = finish(flowkit(project, *common, "--name", "c"))
    assert code == 0, out
    assert f"{ROWS} ok, 0 failed, 0 bad input, 0 invalid; cache hits {ROWS}" in out
    rows = read_jsonl(project / "runs" / "c" / "outputs.jsonl")
    assert [r["outputs"]["y"] for r in rows] == [i * i for i in range(ROWS)]


def test_show_and_trace_of_a_run_in_progress(project: Path) -> None:
    proc = flowkit(
        project,
        *("run", "slow.yaml", "--data", "data.jsonl", "--name", "live", "--no-cache", "-q"),
        *("--concurrency", "2"),
        nap=0.1,
    )
    run = project / "runs" / "live"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = read_json(run / "run.json") if (run / "run.json").is_file() else {}
            if info.get("counts", {}).get("rows") and read_jsonl(run / "outputs.jsonl"):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the run never reported rows done")

        code, out = finish(flowkit(project, "show", "live"))
        assert code == 0, out
        assert "Traceback" not in out
        assert re.search(r"status\s+running", out), out
        done = int(re.search(r"rows\s+rows (\d+)", out)[1])  # type: ignore[index]
        assert 0 < done < ROWS

        code, out = finish(flowkit(project, "trace", "live", "--row", "0"))
        assert (code, "Traceback" in out) == (0, False), out
        assert "row 0" in out and "sq" in out
        code, out = finish(flowkit(project, "trace", "live", "--failed"))
        assert (code, "Traceback" in out) == (0, False), out
        code, out = finish(flowkit(project, "runs"))
        assert (code, "Traceback" in out) == (0, False), out
        assert "live" in out and "running" in out
        assert proc.poll() is None, "the run finished before it could be watched"
    finally:
        proc.send_signal(signal.SIGINT)
        code, out = finish(proc)
    assert code == 130, out
    assert read_json(run / "run.json")["status"] == "interrupted"
