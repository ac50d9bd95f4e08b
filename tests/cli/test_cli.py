"""The `flowkit` command: exit codes, error lines without tracebacks, list/show/runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, REPO, read_json, start_flowkit, write, write_jsonl

BOOM = """
    name: boom
    inputs: {x: {type: integer}}
    outputs: {y: ${b.output}}
    nodes:
      - {name: b, type: python, source: nodes.py, function: boom_on_3, inputs: {x: ${inputs.x}}}
      - {name: m, type: aggregate, source: nodes.py, function: mean, inputs: {values: ${b.output}}}
    """
NODES = """
def boom_on_3(x):
    if x == 3:
        raise ValueError("three")
    return x


def mean(values):
    return {"mean": sum(values) / len(values)}
"""


@pytest.fixture
def boom(workdir: Path) -> Path:
    write(workdir / "nodes.py", NODES)
    write_jsonl(workdir / "d.jsonl", [{"x": i} for i in range(8)])
    return write(workdir / "boom.yaml", BOOM)


def flowkit(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def run_boom(*extra: str) -> Result:
    return flowkit("run", "boom.yaml", "--data", "d.jsonl", "--cache-dir", "cache", "-q", *extra)


def assert_error(result: Result, code: int, message: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.output


# ------------------------------------------------------------------------------ validate


def test_validate_reports_all_problems_and_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    ok = flowkit("validate", "f1_score")
    assert ok.exit_code == 0 and ok.stdout == "ok: f1_score (f1_score, 2 nodes)\n"
    result = flowkit(
        "validate",
        "tests/fixtures/flows/cycle.yaml",
        "f1_score",
        "tests/fixtures/flows/unknown_keys.yaml",
    )
    assert result.exit_code == 2
    assert result.stdout == "ok: f1_score (f1_score, 2 nodes)\n"
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 6 problems"
    assert lines[1] == "tests/fixtures/flows/cycle.yaml:7: node 'a': cycle: a → b → a"
    assert lines[2] == (
        "tests/fixtures/flows/unknown_keys.yaml:2: unknown key 'ouputs' (did you mean 'outputs'?)"
    )
    assert len(lines) == 7
    assert "Traceback" not in result.output


def test_the_installed_command_exits_2_without_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flowkit.cli", "validate", "tests/fixtures/flows/cycle.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "error: 1 problem\ntests/fixtures/flows/cycle.yaml:7: node 'a': cycle: a → b → a\n"
    )


# ------------------------------------------------------------------------------ run


def test_failed_rows_fail_the_run_by_default_after_the_errors_and_what_to_do(boom: Path) -> None:
    result = run_boom()
    assert result.exit_code == 1, result.output
    assert "rows 8: 7 ok, 1 failed, 0 bad input, 0 invalid" in result.stdout
    assert "boom.mean" in result.stdout
    assert "m: rows left out" in result.stdout
    # The errors grouped by node and type, as `flowkit show` prints them, then what to do.
    lines = [line.split() for line in result.stderr.splitlines()]
    assert lines[0] == ["errors"]
    assert lines[1] == ["node", "type", "count", "rows", "example"]
    assert lines[2] == ["b", "ValueError", "1", "3", "three"]
    run_id = Path(result.stdout.split("run folder: ")[1].strip()).name
    assert result.stderr.splitlines()[3:] == [
        f"hint: see the failed rows: flowkit trace {run_id} --failed",
        f"hint: once the cause is fixed: flowkit run --resume {run_id}",
        "error: 1 of 8 rows (12.5%) failed or were bad input, more than --fail-on-error 0 (the "
        "default: give a ratio to accept some)",
    ]


def test_fail_on_error_exits_1_past_the_ratio(boom: Path) -> None:
    allowed = run_boom("--fail-on-error", "0.2")  # 1 of 8 = 12.5 %
    assert allowed.exit_code == 0
    assert allowed.stderr.splitlines()[-1] == (
        "1 of 8 rows (12.5%) failed or were bad input, within --fail-on-error 0.2"
    )
    result = run_boom("--fail-on-error", "0.1")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "error: 1 of 8 rows (12.5%) failed or were bad input, more than --fail-on-error 0.1"
    )


def test_a_failed_gate_exits_1_and_names_the_gate(boom: Path) -> None:
    passed = run_boom("--gate", "boom.mean>=3", "--fail-on-error", "1")
    assert passed.exit_code == 0
    assert passed.stderr.splitlines()[-1] == "gate boom.mean>=3: passed (boom.mean = 3.57143)"
    result = run_boom("--gate", "boom.mean>=3", "--gate", "boom.mean>=4", "--fail-on-error", "1")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-2:] == [
        "gate boom.mean>=3: passed (boom.mean = 3.57143)",
        "error: gate boom.mean>=4: failed, boom.mean = 3.57143",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--map", "oops"],
            "error: --map 'oops' must be NAME=VALUE, e.g. --map answer=${data.response}",
        ),
        (["--map", "z=${data.x}"], "error: --map names 'z', not an input of flow 'boom'"),
        (["--map", "x=${x}"], "error: --map x=…: cannot read mapping '${x}'"),
        (["--gate", "boom.mean"], "error: --gate 'boom.mean' must read METRIC<OP>NUMBER"),
        (["--concurrency", "0"], "error: --concurrency must be a whole number at least 1"),
    ],
)
def test_usage_errors_exit_2(boom: Path, args: list[str], message: str) -> None:
    assert_error(run_boom(*args), 2, message)


def test_a_missing_data_file_or_flow_exits_2(boom: Path) -> None:
    assert_error(
        flowkit("run", "boom.yaml", "--data", "nope.jsonl"),
        2,
        "error: data file 'nope.jsonl' does not exist",
    )
    assert_error(
        flowkit("run", "nosuchflow", "--data", "d.jsonl"),
        2,
        "error: no flow file 'nosuchflow' and no built-in flow of that name",
    )


def test_a_flow_that_does_not_validate_exits_2(workdir: Path) -> None:
    write(workdir / "bad.yaml", "name: bad\nnodes:\n  - {name: a, type: pyhton}\n")
    write_jsonl(workdir / "d.jsonl", [{"x": 1}])
    result = flowkit("run", "bad.yaml", "--data", "d.jsonl")
    assert_error(result, 2, "bad.yaml:3: node 'a': unknown node type 'pyhton'")
    assert not (workdir / "runs").exists()


def test_no_cache_and_refresh(boom: Path, workdir: Path) -> None:
    assert (
        "cache hits 0"
        in flowkit(
            "run", "boom.yaml", "--data", "d.jsonl", "--no-cache", "--cache-dir", "nocache", "-q"
        ).stdout
    )
    assert not (workdir / "nocache").exists()
    run_boom()
    assert "cache hits 7" in run_boom().stdout
    assert "cache hits 0" in run_boom("--refresh", "b").stdout


def test_several_flows_run_together(workdir: Path) -> None:
    result = flowkit(
        "run",
        "f1_score",
        "exact_match",
        "--data",
        EXAMPLES / "qa.jsonl",
        "--name",
        "suite-run",
        "-q",
    )
    assert result.exit_code == 0, result.output
    metrics = read_json(workdir / "runs" / "suite-run" / "metrics.json")
    assert metrics["f1_score.count"] == metrics["exact_match.count"] == 6
    assert metrics["exact_match.mean"] == 0.0
    assert 0 < metrics["f1_score.mean"] < 1
    assert "f1_score.mean" in result.stdout and "exact_match.mean" in result.stdout


# ------------------------------------------------------------------------------ list/show/runs


def test_list_shows_the_built_in_flows() -> None:
    result = flowkit("list")
    assert result.exit_code == 0
    for name, words in [
        ("f1_score", "Token F1"),
        ("exact_match", "exact"),
        ("groundedness", "entailed by the context"),
    ]:
        line = next(ln for ln in result.stdout.splitlines() if ln.split()[:1] == [name])
        assert words in line


def test_show_and_runs(llm_server: LocalServer, workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"context": "c", "answer": "a [[reply: 4]]"}])
    result = flowkit("run", "groundedness", "--data", "d.jsonl", "--name", "g-first", "-q")
    assert result.exit_code == 0, result.output
    shown = flowkit("show", "g-fi")
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "g-first" in out and "groundedness (" in out and "completed" in out
    assert "groundedness.mean" in out
    assert "tokens" in out and "in 1 calls" in out
    listed = flowkit("runs")
    assert listed.exit_code == 0
    assert "g-first" in listed.stdout and "groundedness.mean=4" in listed.stdout
    assert_error(flowkit("show", "nothing-like-it"), 2, "error: no run folder 'nothing-like-it'")


def test_ctrl_c_stops_promptly_keeps_finished_rows_and_marks_the_run(tmp_path: Path) -> None:
    import json
    import signal
    import time

    (tmp_path / "slow.py").write_text(
        "import time\ndef nap(x):\n    time.sleep(0.1)\n    return x\n"
    )
    (tmp_path / "f.yaml").write_text(
        "name: slow\ninputs: {x: {type: integer}}\noutputs: {y: '${n.output}'}\nnodes:\n"
        "  - {name: n, type: python, source: slow.py, function: nap, inputs: {x: '${inputs.x}'}}\n"
    )
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"x": i}) + "\n" for i in range(500)))
    proc = start_flowkit(
        tmp_path,
        *("run", "f.yaml", "--data", "d.jsonl", "--no-cache", "--output", "out", "-q"),
        *("--concurrency", "4"),
    )
    out = tmp_path / "out" / "outputs.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size == 0):
        time.sleep(0.1)  # wait until rows are being written (flushed once a second)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "error: interrupted; finished rows are kept in out" in err
    assert "Traceback" not in err
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert info["status"] == "interrupted"
    assert 0 < len(rows) < 500 and info["counts"]["rows"] == len(rows)
    lines = [r["line"] for r in rows]
    assert lines == sorted(set(lines))  # input order; rows in flight at the signal are absent
