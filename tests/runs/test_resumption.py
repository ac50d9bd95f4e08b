"""`flowkit run --resume`: finished rows are kept, the rest run, and the end result equals an
uninterrupted run — after failed rows, after Ctrl-C and after kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.flow.loader import load_flows
from flowkit.runs.folder import claim_run_dir, effective_status, process_start, read_run_info
from tests.support import read_json, read_jsonl, start_flowkit, write, write_jsonl

ROWS = 60

NODES = """
import os
import time


def score(x):
    # Fails on every third row while the marker file exists: an endpoint that was down.
    if x % 3 == 0 and os.path.exists(os.environ.get("FLOWKIT_TEST_FLAKY", "/nonexistent")):
        raise RuntimeError(f"flaky on {x}")
    time.sleep(float(os.environ.get("FLOWKIT_TEST_SLEEP", "0")))
    return {"value": x * 0.5, "label": "even" if x % 2 == 0 else "odd"}


def stats(values, xs, labels):
    return {
        "mean": sum(values) / len(values),
        "n": len(values),
        "xsum": sum(xs),
        "even": labels.count("even"),
    }
"""

INNER = """
    name: inner
    inputs: {x: {type: integer}, scale: {type: number, default: 2.0}}
    outputs: {scaled: ${m.output}}
    nodes:
      - {name: m, type: python, source: nodes.py, function: scale,
         inputs: {x: ${inputs.x}, by: ${inputs.scale}}}
      - {name: total, type: aggregate, source: nodes.py, function: summed,
         inputs: {values: ${m.output}, xs: ${inputs.x}}}
"""

FLOW = """
    name: flaky
    inputs: {x: {type: integer}}
    outputs: {value: ${s.output.value}, scaled: ${sub.output.scaled}}
    nodes:
      - {name: s, type: python, source: nodes.py, function: score, inputs: {x: ${inputs.x}}}
      - {name: sub, type: flow, flow: inner.yaml, inputs: {x: ${inputs.x}}}
      - {name: agg, type: aggregate, source: nodes.py, function: stats,
         inputs: {values: ${s.output.value}, xs: ${inputs.x}, labels: ${s.output.label}}}
"""

MORE_NODES = """

def scale(x, by):
    return x * by


def summed(values, xs):
    return {"sum": sum(values), "xs": sum(xs)}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(tmp_path / "nodes.py", NODES + MORE_NODES)
    write(tmp_path / "inner.yaml", INNER)
    write(tmp_path / "flaky.yaml", FLOW)
    write_jsonl(
        tmp_path / "data.jsonl",
        [{"x": i, "answer": f"r {i % 4}", "ground_truth": "r 1"} for i in range(ROWS)],
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLOWKIT_TEST_FLAKY", str(tmp_path / "down"))
    return tmp_path


def comparable(run_dir: Path) -> dict[str, Any]:
    """What must equal an uninterrupted run: rows, metrics, and the per-row nodes traced."""
    traces = read_jsonl(run_dir / "traces.jsonl")
    per_row = sorted((t["line"], t["node"], t["status"]) for t in traces)
    assert len(per_row) == len(set(per_row)), "a node was traced twice for one row"
    outputs = read_jsonl(run_dir / "outputs.jsonl")
    assert [r["line"] for r in outputs] == sorted(r["line"] for r in outputs)
    return {
        "outputs": outputs,
        "metrics": read_json(run_dir / "metrics.json"),
        "traced": per_row,
    }


def clean_run(project: Path) -> dict[str, Any]:
    result = flowkit.run(
        load_flows(["flaky.yaml", "f1_score"]),
        "data.jsonl",
        output=project / "clean",
        cache_dir=project / "clean-cache",
    )
    assert result.counts["failed"] == 0
    return comparable(result.run_dir)


def test_resume_reruns_failed_rows_and_equals_an_uninterrupted_run(project: Path) -> None:
    (project / "down").touch()
    first = flowkit.run(load_flows(["flaky.yaml", "f1_score"]), "data.jsonl", name="r1")
    assert first.counts["failed"] == ROWS // 3
    (project / "down").unlink()

    resumed = flowkit.resume("r1")

    assert resumed.status == "completed"
    assert resumed.counts["rows"] == ROWS and resumed.counts["succeeded"] == ROWS
    assert resumed.counts["failed"] == 0
    assert comparable(resumed.run_dir) == clean_run(project)
    info = read_run_info(resumed.run_dir)
    assert info["resumes"][0]["previous"]["counts"]["failed"] == ROWS // 3
    assert info["status"] == "completed"


def test_resume_of_a_finished_run_keeps_every_row_and_recomputes_the_metrics(
    project: Path,
) -> None:
    first = flowkit.run(load_flows(["flaky.yaml", "f1_score"]), "data.jsonl", name="r1")
    before = comparable(first.run_dir)
    (first.run_dir / "metrics.json").unlink()

    resumed = flowkit.resume("r1")

    assert comparable(resumed.run_dir) == before
    assert (
        resumed.counts["rows"] == ROWS
        and resumed.counts["node_runs"] == 0 + (first.counts["node_runs"])
    )


def start_slow_run(project: Path) -> subprocess.Popen[str]:
    return start_flowkit(
        project,
        *("run", "flaky.yaml", "f1_score", "--data", "data.jsonl", "--name", "r1", "-q"),
        *("--concurrency", "2"),
        env={"FLOWKIT_TEST_SLEEP": "0.05"},
    )


def wait_for_rows(path: Path, rows: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {rows} rows")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_resume_after_the_process_was_stopped(project: Path, how: signal.Signals) -> None:
    proc = start_slow_run(project)
    run_dir = project / "runs" / "r1"
    wait_for_rows(run_dir / "outputs.jsonl", 5)
    proc.send_signal(how)
    proc.communicate(timeout=30)
    info = read_run_info(run_dir)
    assert effective_status(info) == "interrupted"
    done = read_jsonl(run_dir / "outputs.jsonl")
    assert 5 <= len(done) < ROWS
    with open(run_dir / "outputs.jsonl", "ab") as f:
        f.write(b'{"line": 59, "status": "ok", "inp')  # the write a kill cut short

    shown = CliRunner().invoke(main, ["show", "r1"])
    assert shown.exit_code == 0
    if how == signal.SIGKILL:  # run.json still says running: the reader tells the truth
        assert info["status"] == "running"
        assert "interrupted (process gone)" in shown.stdout

    resumed = CliRunner().invoke(main, ["run", "--resume", "r1", "-q"])

    assert resumed.exit_code == 0, resumed.output
    assert f"rows {ROWS}: {ROWS} ok, 0 failed" in resumed.stdout
    assert comparable(run_dir) == clean_run(project)
    kept = {r["line"]: r for r in done}
    final = {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}
    assert all(final[line] == rec for line, rec in kept.items())


def test_resume_keeps_token_counts_of_kept_rows(llm_server: Any, workdir: Path) -> None:
    rows = [{"question": f"q{i}", "answer": f"a{i} [[reply: {1 + i % 5}]]"} for i in range(12)]
    write_jsonl(workdir / "qa.jsonl", rows)
    clean = flowkit.run("coherence", "qa.jsonl", name="clean", use_cache=False)
    cut = flowkit.run("coherence", "qa.jsonl", name="cut", use_cache=False)
    outputs = cut.run_dir / "outputs.jsonl"
    lines = outputs.read_bytes().splitlines(keepends=True)
    outputs.write_bytes(b"".join(lines[:5]))  # as if killed after five rows
    info = read_run_info(cut.run_dir)
    write(cut.run_dir / "run.json", json.dumps({**info, "status": "interrupted"}))
    llm_server.reset()

    resumed = flowkit.resume("cut")

    assert llm_server.stats()["chat_completions"] == 7
    assert resumed.tokens == clean.tokens
    assert resumed.metrics == clean.metrics
    assert resumed.counts["rows"] == 12 and resumed.counts["node_runs"] == clean.counts["node_runs"]


def test_resume_refuses_a_changed_flow_or_data_or_a_live_run(project: Path) -> None:
    flowkit.run("flaky.yaml", "data.jsonl", name="r1")
    nodes = project / "nodes.py"
    original = nodes.read_text()
    nodes.write_text(original.replace("x * 0.5", "x * 0.25"))
    with pytest.raises(UsageError) as changed:
        flowkit.resume("r1")
    assert str(changed.value) == (
        "run 'r1': flow 'flaky' changed since the run (nodes, prompts or code)\n"
        "  hint: a resume must finish what was started; --allow-changes (allow_changes=True) "
        "reruns every row in this folder, the cache answering each unchanged node; or start "
        "a new run"
    )
    nodes.write_text(original)

    data = (project / "data.jsonl").read_bytes()
    with open(project / "data.jsonl", "a") as f:
        f.write('{"x": 99}\n')
    with pytest.raises(UsageError, match=r"data file .*data.jsonl is missing or changed"):
        flowkit.resume("r1")

    run_dir = project / "runs" / "r1"
    # A run folder from before leases: its run.json's process says whether it runs.
    info = {k: v for k, v in read_run_info(run_dir).items() if k != "lease"}
    for lease in run_dir.glob("lease-*.json"):
        lease.unlink()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            alive = {
                "status": "running",
                "pid": other.pid,
                "pid_started": process_start(other.pid),
            }
            write(run_dir / "run.json", json.dumps({**info, **alive}))
            with pytest.raises(UsageError, match=rf"run 'r1' is still running \(pid {other.pid}\)"):
                flowkit.resume("r1")
            # The same id, started at another time, is another process: the run was killed.
            write(run_dir / "run.json", json.dumps({**alive, "pid_started": 1}))
            assert effective_status(read_run_info(run_dir)) == "interrupted"
            # A live lease held by a live process: another resume is under way.
            held = {**alive, "host": socket.gethostname(), "role": "resume", "holder": "h"}
            write(run_dir / "lease-000001.json", json.dumps({**held, "expires": time.time() + 60}))
            with pytest.raises(UsageError, match=rf"being resumed on host .* \(pid {other.pid}, "):
                flowkit.resume("r1")
        finally:
            other.kill()
    # The run.json of this very process, and a lease left by a dead one, are no obstacle.
    write(run_dir / "run.json", json.dumps({**info, "status": "running", "pid": os.getpid()}))
    (project / "data.jsonl").write_bytes(data)
    assert flowkit.resume("r1").counts["rows"] == ROWS
    newest = json.loads((run_dir / "lease-000002.json").read_text())
    assert newest["released"] and newest["role"] == "resume"


def test_a_resume_holds_the_folder_as_a_new_run_does(project: Path) -> None:
    (project / "down").touch()
    flowkit.run(load_flows(["flaky.yaml", "f1_score"]), "data.jsonl", name="r1")
    (project / "down").unlink()
    run_dir = project / "runs" / "r1"
    refused: list[str] = []

    def meanwhile(_: Any) -> None:
        # A run started now with --overwrite on this folder must not clear it under the resume.
        if not refused:
            with pytest.raises(UsageError) as caught:
                claim_run_dir(run_dir, overwrite=True)
            refused.append(caught.value.message)

    resumed = flowkit.resume("r1", on_progress=meanwhile)
    assert refused == [f"run folder {str(run_dir)!r} is being written by another run"]
    assert resumed.counts["succeeded"] == ROWS
    assert comparable(resumed.run_dir) == clean_run(project)
    # The lock is let go with the run: the folder can be taken over now.
    claim_run_dir(run_dir, overwrite=True).close()
    assert not (run_dir / "run.json").exists()


def test_cli_resume_takes_no_flow_data_or_run_defining_options(project: Path) -> None:
    flowkit.run("flaky.yaml", "data.jsonl", name="r1")
    result = CliRunner().invoke(
        main, ["run", "flaky.yaml", "--resume", "r1", "--limit", "3", "--run", "x"]
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --resume reuses the run's own flow, data and options; drop FLOW/--data, "
        "--run, --limit\n"
        "  hint: to change them, start a new run (the cache keeps finished nodes free)"
    )
    missing = CliRunner().invoke(main, ["run", "--data", "data.jsonl"])
    assert missing.exit_code == 2
    assert "error: run needs a FLOW and --data (or --resume RUN)" in missing.stderr


def test_resume_refuses_an_earlier_run_whose_outputs_changed(workdir: Path) -> None:
    # An evaluation reads an app run's outputs (--run): running the app again into that folder
    # must not let a resume judge v2 answers beside v1 ones.
    write(workdir / "app.py", "def answer(q):\n    return 'v1-' + q\n")
    write(
        workdir / "app.yaml",
        "name: app\ninputs: {q: {type: string}}\noutputs: {answer: ${a.output}}\nnodes:\n"
        "  - {name: a, type: python, source: app.py, function: answer, inputs: {q: ${inputs.q}}}\n",
    )
    write(workdir / "ev.py", "def ev(answer):\n    return len(answer)\n")
    write(
        workdir / "ev.yaml",
        "name: ev\ninputs: {answer: {type: string}}\noutputs: {n: ${e.output}}\nnodes:\n"
        "  - {name: e, type: python, source: ev.py, function: ev,\n"
        "     inputs: {answer: ${inputs.answer}}}\n",
    )
    data = write_jsonl(workdir / "d.jsonl", [{"q": "a"}, {"q": "b"}])
    flowkit.run("app.yaml", data, output="appA")
    mapping = {"answer": "${run.outputs.answer}"}
    flowkit.run("ev.yaml", data, prior_run="appA", mapping=mapping, output="evE")
    flowkit.resume("evE")  # unchanged: nothing to refuse
    write(workdir / "app.py", "def answer(q):\n    return 'v2-' + q\n")
    flowkit.run("app.yaml", data, output="appA", overwrite=True)
    with pytest.raises(UsageError) as refused:
        flowkit.resume("evE")
    assert str(refused.value) == (
        f"run 'evE': earlier run {workdir / 'appA'} changed since the run (its outputs are this "
        "run's data)\n  hint: restore that run's folder, or start a new run"
    )
