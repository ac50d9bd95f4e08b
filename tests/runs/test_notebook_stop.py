"""A run started from inside a running event loop (Jupyter, an async app) stops as Ctrl-C stops
one in the CLI: a kernel interrupt, or cancelling ``await flowkit.arun(...)``, ends it as
``interrupted`` with its finished rows kept, nothing left running, and ``resume`` finishes it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import flowkit
from tests.support import REPO, python_flow, read_json, read_jsonl, write_jsonl

ROWS = 40


def _slow_flow(folder: Path) -> Path:
    write_jsonl(folder / "rows.jsonl", [{"x": i} for i in range(ROWS)])
    return python_flow(folder, "import time\n\ndef f(x):\n    time.sleep(0.1)\n    return x\n")


def _finished(run_dir: Path) -> int:
    path = run_dir / "outputs.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for_rows(run_dir: Path, rows: int) -> None:
    deadline = time.monotonic() + 60
    while _finished(run_dir) < rows:
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.05)


NOTEBOOK = textwrap.dedent(
    """
    import asyncio, signal
    import flowkit
    from flowkit.api import Interrupted

    async def cell():
        # What ipykernel does while a cell runs: SIGINT raises KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            flowkit.run("t.yaml", "rows.jsonl", name="nb", use_cache=False, concurrency=2)
        except Interrupted as err:
            print("caught:", err, flush=True)

    asyncio.run(cell())
    print("kernel alive", flush=True)
    """
)


@pytest.mark.slow
def test_a_kernel_interrupt_stops_a_run_inside_a_running_loop(tmp_path: Path) -> None:
    _slow_flow(tmp_path)
    (tmp_path / "cell.py").write_text(NOTEBOOK)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "cell.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    run_dir = tmp_path / "runs" / "nb"
    _wait_for_rows(run_dir, 4)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert out.splitlines() == [
        f"caught: interrupted; finished rows are kept in {Path('runs') / 'nb'}",
        "kernel alive",
    ], err
    assert read_json(run_dir / "run.json")["status"] == "interrupted"
    kept = _finished(run_dir)
    assert 4 <= kept < ROWS
    resumed = flowkit.resume(run_dir)
    assert resumed.status == "completed"
    rows = read_jsonl(run_dir / "outputs.jsonl")
    assert sorted(r["line"] for r in rows) == list(range(ROWS))


def test_cancelling_arun_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    flow = _slow_flow(tmp_path)
    run_dir = tmp_path / "runs" / "c"

    async def cell() -> None:
        task = asyncio.create_task(
            flowkit.arun(flow, tmp_path / "rows.jsonl", name="c", use_cache=False, concurrency=2)
        )
        while _finished(run_dir) < 4:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cell())
    # The run is over when the cancel arrives: closed as interrupted, nothing left writing.
    assert read_json(run_dir / "run.json")["status"] == "interrupted"
    kept = _finished(run_dir)
    time.sleep(0.5)
    assert _finished(run_dir) == kept < ROWS
    assert not [t for t in threading.enumerate() if t.name.startswith("flowkit-run")]
    assert flowkit.resume(run_dir).status == "completed"
    assert len(read_jsonl(run_dir / "outputs.jsonl")) == ROWS
