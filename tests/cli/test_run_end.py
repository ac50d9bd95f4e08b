"""An honest end of `flowkit run`: errors grouped, every count in the summary line, hints,
exit 1 when no row produced a value, progress lines in CI logs, invalid rows counted through
sub-flows, and the report written into the run folder."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, REPO, python_flow, read_json, write, write_jsonl

GROUNDEDNESS = str(REPO / "flows" / "groundedness.yaml")


def flowkit(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_run_where_every_call_fails_says_so_and_exits_1(workdir: Path) -> None:
    write(
        workdir / "flowkit.yaml",
        f"""
        default_model: gpt-4o-mini
        default_connection: dead
        connections:
          dead: {{type: openai, base_url: "http://127.0.0.1:{free_port()}/v1", api_key: x,
                  max_retries: 0}}
    """,
    )
    proc = flowkit(workdir, "run", GROUNDEDNESS, "--data", str(EXAMPLES / "qa.jsonl"))
    assert proc.returncode == 1, proc.stderr
    assert "rows 6: 0 ok, 6 failed, 0 bad input, 0 invalid" in proc.stdout
    # A loaded machine may make the run long enough for a progress line (one every 5 s).
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("progress:")]
    assert lines[0].split() == ["errors"]
    assert lines[1].split() == ["node", "type", "count", "rows", "example"]
    assert lines[2].split()[:3] == ["judge", "APIConnectionError", "6"]
    run_id = Path(proc.stdout.split("run folder: ")[1].split()[0]).name
    assert f"hint: see the failed rows: flowkit trace {run_id} --failed" in lines
    assert f"hint: once the cause is fixed: flowkit run --resume {run_id}" in lines
    assert lines[-1] == (
        "error: no row produced a value (6 rows: 0 ok, 6 failed, 0 bad input, 0 invalid); exiting 1"
    )


def test_a_run_of_only_bad_rows_exits_1(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a"}, {"ground_truth": "b"}])  # one field each
    proc = flowkit(workdir, "run", "f1_score", "--data", "d.jsonl")
    assert proc.returncode == 1, proc.stderr
    assert "rows 2: 0 ok, 0 failed, 2 bad input, 0 invalid" in proc.stdout
    assert proc.stderr.splitlines()[-1] == (
        "error: no row produced a value (2 rows: 0 ok, 0 failed, 2 bad input, 0 invalid); exiting 1"
    )


def test_unreadable_judge_answers_are_counted_and_exit_1(
    llm_server: LocalServer, workdir: Path
) -> None:
    llm_server.configure(rules=[(".", "I cannot say.")])
    try:
        proc = flowkit(
            workdir,
            "run",
            GROUNDEDNESS,
            "--data",
            str(EXAMPLES / "qa.jsonl"),
            env={"FLOWKIT_CACHE_DIR": str(workdir / "cache")},
        )
    finally:
        llm_server.configure(rules=[])
    assert "rows 6: 6 ok, 0 failed, 0 bad input, 6 invalid" in proc.stdout
    run_id = Path(proc.stdout.split("run folder: ")[1].split()[0]).name
    assert f"hint: see unreadable judge answers: flowkit show {run_id}" in proc.stderr
    assert proc.returncode == 1


def test_a_run_with_values_exits_0(llm_server: LocalServer, workdir: Path) -> None:
    proc = flowkit(workdir, "run", GROUNDEDNESS, "--data", str(EXAMPLES / "qa.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "rows 6: 6 ok, 0 failed, 0 bad input, 0 invalid" in proc.stdout
    # A loaded machine may make the run long enough for a progress line (one every 5 s).
    assert [line for line in proc.stderr.splitlines() if not line.startswith("progress:")] == []


def test_without_a_terminal_progress_lines_show_life(workdir: Path) -> None:
    write(
        workdir / "slow.py",
        """
        import time

        def slow(x):
            time.sleep(0.05)
            return x
    """,
    )
    write(
        workdir / "slow.yaml",
        """
        name: slow
        inputs: {x: {type: number}}
        outputs: {x: ${slow.output}}
        nodes:
          - {name: slow, type: python, source: slow.py, function: slow, inputs: {x: ${inputs.x}}}
    """,
    )
    write_jsonl(workdir / "d.jsonl", [{"x": i} for i in range(30)])
    proc = flowkit(
        workdir,
        "run",
        "slow.yaml",
        "--data",
        "d.jsonl",
        "--concurrency",
        "1",
        env={"FLOWKIT_PROGRESS_SECONDS": "0.3"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2, proc.stderr
    assert all((" · ok " in line and "/30 " in line) or "waiting" in line for line in lines)


SUB = """
name: sub
inputs: {x: {type: number}}
outputs: {score: ${judge.output.score}, result: ${judge.output.result}}
nodes:
  - {name: judge, type: python, source: judge.py, function: judge, inputs: {x: ${inputs.x}}}
"""
SUITE = """
name: suite
inputs: {x: {type: number}}
outputs: {sub: ${sub.output.score}}
nodes:
  - {name: sub, type: flow, flow: sub.yaml, inputs: {x: ${inputs.x}}}
"""


def test_invalid_rows_are_counted_through_sub_flows(workdir: Path) -> None:
    write(
        workdir / "judge.py",
        """
        def judge(x):
            return {"score": None, "result": "invalid"} if x % 2 else {"score": x, "result": "pass"}
    """,
    )
    write(workdir / "sub.yaml", SUB)
    write(workdir / "suite.yaml", SUITE)
    write_jsonl(workdir / "d.jsonl", [{"x": i} for i in range(6)])
    result = CliRunner().invoke(main, ["run", "suite.yaml", "--data", "d.jsonl", "--name", "s"])
    assert result.exit_code == 0, result.output
    assert read_json(workdir / "runs" / "s" / "run.json")["counts"]["invalid"] == 3
    assert "rows 6: 6 ok, 0 failed, 0 bad input, 3 invalid" in result.stdout


def test_report_is_written_into_the_run_folder_by_default(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    runner = CliRunner()
    assert (
        runner.invoke(main, ["run", "f1_score", "--data", "d.jsonl", "--name", "r"]).exit_code == 0
    )
    result = runner.invoke(main, ["report", "r"])
    assert result.exit_code == 0, result.output
    assert (workdir / "runs" / "r" / "report.html").is_file()
    assert not (workdir / "report.html").exists()
    assert f"report: {Path('runs') / 'r' / 'report.html'}" in result.stdout


def test_a_failed_aggregate_fails_the_run_and_the_other_gates_still_speak(workdir: Path) -> None:
    module = "def f(x):\n    return x\n\ndef agg(ys):\n    return sum(ys) / len(ys)\n"
    python_flow(workdir, module, "agg")
    write_jsonl(workdir / "d.jsonl", [{"x": 1}, {"x": 2}])
    result = CliRunner().invoke(
        main, ["run", "t.yaml", "--data", "d.jsonl", "-q", "--summary", "md"],
        env={"GITHUB_STEP_SUMMARY": None},
    )  # fmt: skip
    assert result.exit_code == 1
    assert "error: aggregate 'a': " in result.output
    assert "| aggregate a | ❌ " in result.output


# Real time against a rate cap: the pace is learned from how fast replies come back, which a
# test running beside others on the same cores skews; the slow stage runs it alone (-n0).
@pytest.mark.slow
def test_notes_nobody_can_act_on_are_printed_only_with_verbose(
    llm_server: LocalServer, workdir: Path
) -> None:
    # A cap without headers (200 requests a second, a burst of 10): the first run's opening at
    # full concurrency is cut and the pace it measured is kept for the next.
    rows = [{"context": f"c{i}", "answer": f"a{i}"} for i in range(40)]
    write_jsonl(workdir / "rows.jsonl", rows)
    args = ["run", "groundedness", "--data", "rows.jsonl", "-q", "--no-cache"]
    args += ["--concurrency", "16", "--cache-dir", "cache"]
    llm_server.configure(rpm=600, limit_window=3.0, retry_after=0.2)
    try:
        assert CliRunner().invoke(main, args).exit_code == 0  # finds the endpoint out
        quiet = CliRunner().invoke(main, args)  # opens where the last run left it
    finally:
        llm_server.configure(rpm=0, limit_window=60.0, retry_after=1.0)
    assert quiet.exit_code == 0, quiet.output
    assert "opened at" not in quiet.output
    run_dir = quiet.stdout.split("run folder: ")[1].split()[0]
    assert [n for n in read_json(Path(run_dir) / "run.json")["notes"] if "opened at" in n]
    verbose = CliRunner().invoke(main, [*args, "-v"])
    assert verbose.exit_code == 0
    run_dir = verbose.stdout.split("run folder: ")[1].split()[0]
    (note,) = read_json(Path(run_dir) / "run.json")["notes"]
    # The console folds long lines at its width: compare without the whitespace.
    assert "".join(f"note: {note}".split()) in "".join(verbose.stderr.split())


def test_a_missing_model_connection_is_one_error_naming_every_node(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "FLOWKIT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    result = CliRunner().invoke(main, ["run", "groundedness", "--data", str(EXAMPLES / "qa.jsonl")])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "error: flow 'groundedness' node 'judge' needs a model, but no model connection is "
        "configured (no OPENAI_API_KEY, OPENAI_BASE_URL or AZURE_OPENAI_ENDPOINT in the "
        f"environment; no flowkit.yaml in {workdir}). The same for flow 'groundedness' node "
        "'judge_turns'."
    )
    assert sum("needs a model" in line for line in lines) == 1
    assert lines[1] == "  ways to configure one:"


def test_the_hints_name_a_run_written_elsewhere_by_its_path(workdir: Path) -> None:
    """A run written with --output outside runs/ cannot be found by its name: the hints give
    the folder, and the command they show finds the run."""
    flow = python_flow(
        workdir, "def f(x):\n    if x == 2:\n        raise ValueError('two')\n    return x\n"
    )
    write_jsonl(workdir / "d.jsonl", [{"x": 1}, {"x": 2}])
    proc = flowkit(workdir, "run", str(flow), "--data", "d.jsonl", "--output", "out/r1")
    assert proc.returncode == 1, proc.stderr
    assert "hint: see the failed rows: flowkit trace out/r1 --failed" in proc.stderr
    assert "hint: once the cause is fixed: flowkit run --resume out/r1" in proc.stderr
    assert flowkit(workdir, "trace", "out/r1", "--failed").returncode == 0
    named = flowkit(workdir, "run", str(flow), "--data", "d.jsonl", "--name", "r2")
    assert "hint: see the failed rows: flowkit trace r2 --failed" in named.stderr


PROBE = """
import runpy, sys
sys.argv = ["flowkit", *sys.argv[1:]]
try:
    runpy.run_module("flowkit.cli", run_name="__main__")
except SystemExit as done:
    assert not done.code, done.code
unneeded = ("flowkit.inspect.ci_report", "flowkit.labels.read")
print(sorted(m for m in unneeded if m in sys.modules))
"""


@pytest.mark.slow  # a process of its own, as a user's shell runs it
def test_a_plain_run_loads_neither_the_ci_report_nor_the_labels_reader(workdir: Path) -> None:
    # Without --summary-file, --junit, --labels or a gate on labelled metrics, neither is read:
    # their modules (XML, the comparisons, the scores) were a fifth of a one-row run's imports.
    import os

    write_jsonl(workdir / "one.jsonl", [{"answer": "Paris", "ground_truth": "Paris"}])
    args = ["run", "f1_score", "--data", "one.jsonl", "-q", "--no-cache"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
