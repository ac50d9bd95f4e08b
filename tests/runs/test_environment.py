"""The environment variables a run sets (``environment``, ``--environment-variables``) are a run
option: in every python node's key, recorded in run.json, set again by a resume, and restored
after the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.runs.environment import run_environment
from flowkit.runs.folder import read_run_info
from tests.support import read_jsonl, write, write_jsonl

TOOL = """
    import os
    from promptflow.core import tool


    @tool
    def t(q: str) -> str:
        return q + ":" + os.environ.get("FLOWKIT_TEST_MODE", "unset")
    """
DAG = """
    inputs: {q: {type: string}}
    outputs: {a: {type: string, reference: "${t.output}"}}
    nodes:
    - {name: t, type: python, source: {type: code, path: t.py}, inputs: {q: "${inputs.q}"}}
    """


@pytest.fixture
def folder(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLOWKIT_TEST_MODE", "outer")  # restored after the test whatever it set
    write(workdir / "flow" / "flow.dag.yaml", DAG)
    write(workdir / "flow" / "t.py", TOOL)
    write_jsonl(workdir / "data.jsonl", [{"q": q} for q in "abcd"])
    return workdir / "flow"


def _answers(run_dir: Path) -> list[str]:
    rows = sorted(read_jsonl(run_dir / "outputs.jsonl"), key=lambda r: r["line"])
    return [r["outputs"]["a"] for r in rows]


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_environment_variables_are_in_a_python_nodes_key_and_recorded(
    folder: Path, workdir: Path
) -> None:
    run = ["run", str(folder), "--data", "data.jsonl", "--cache-dir", "cache", "-q"]
    _cli(*run, "--name", "one", "--environment-variables", "FLOWKIT_TEST_MODE=one")
    _cli(*run, "--name", "two", "--environment-variables", "FLOWKIT_TEST_MODE=two")
    assert _answers(workdir / "runs" / "one") == ["a:one", "b:one", "c:one", "d:one"]
    assert _answers(workdir / "runs" / "two") == ["a:two", "b:two", "c:two", "d:two"]
    info = read_run_info(workdir / "runs" / "two")
    assert info["config"]["environment"] == {"FLOWKIT_TEST_MODE": "two"}


def test_a_resume_sets_the_runs_variables_again_and_the_run_restores_them(
    folder: Path, workdir: Path
) -> None:
    result = flowkit.run(folder, "data.jsonl", name="cut", environment={"FLOWKIT_TEST_MODE": "s"})
    assert os.environ["FLOWKIT_TEST_MODE"] == "outer"  # restored when the run ended
    outputs = result.run_dir / "outputs.jsonl"
    outputs.write_bytes(b"".join(outputs.read_bytes().splitlines(keepends=True)[:2]))
    info = read_run_info(result.run_dir)
    write(result.run_dir / "run.json", json.dumps({**info, "status": "interrupted"}))

    resumed = flowkit.resume("cut")

    assert _answers(resumed.run_dir) == ["a:s", "b:s", "c:s", "d:s"]
    assert os.environ["FLOWKIT_TEST_MODE"] == "outer"


def test_a_resume_given_environment_variables_is_refused(folder: Path, workdir: Path) -> None:
    env = ("--environment-variables", "FLOWKIT_TEST_MODE=s")
    _cli("run", str(folder), "--data", "data.jsonl", "--name", "done", "-q", *env)
    args = ["run", "--resume", "done", "--environment-variables", "FLOWKIT_TEST_MODE=x"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert (
        "error: --resume reuses the run's own flow, data and options; drop "
        "--environment-variables" in result.output
    )


def test_runs_with_other_variables_cannot_overlap_in_one_process(
    folder: Path, workdir: Path
) -> None:
    """A process has one environment: a run whose variables differ from a run in progress is
    refused (either would read the other's); the same variables may overlap."""
    with run_environment({"FLOWKIT_TEST_MODE": "first"}):
        with pytest.raises(UsageError) as refused:
            flowkit.run(folder, "data.jsonl", name="x", environment={"FLOWKIT_TEST_MODE": "s"})
        same = flowkit.run(
            folder, "data.jsonl", name="y", environment={"FLOWKIT_TEST_MODE": "first"}
        )
        assert os.environ["FLOWKIT_TEST_MODE"] == "first"  # still the outer run's
    assert str(refused.value) == (
        "environment variables FLOWKIT_TEST_MODE: a run with FLOWKIT_TEST_MODE is in progress "
        "in this process, and a process has one environment\n"
        "  hint: run them one after another, or in separate processes"
    )
    assert _answers(same.run_dir) == ["a:first", "b:first", "c:first", "d:first"]
    assert os.environ["FLOWKIT_TEST_MODE"] == "outer"
