"""Every file flowkit reads back from a run folder is damaged until parsed: a run.json that is
not a run's record is a clear error naming it (for resume and show alike), never a traceback,
and an outputs.jsonl record that is not what flowkit writes is not kept: its row runs again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from tests.support import python_flow, read_jsonl, write_jsonl


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    python_flow(tmp_path, "def f(x):\n    return x + 1\n")
    write_jsonl(tmp_path / "rows.jsonl", [{"x": i} for i in range(3)])
    return flowkit.run(tmp_path / "t.yaml", tmp_path / "rows.jsonl", name="r").run_dir


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("garbage", "Expecting value: line 1 column 1 (char 0)"),
        ("[1, 2]", "a JSON list, not an object"),
        ('"run"', "a JSON str, not an object"),
    ],
)
@pytest.mark.parametrize("command", [["run", "--resume", "r"], ["show", "r"]])
def test_a_damaged_run_json_is_named_not_a_traceback(
    run_dir: Path, text: str, problem: str, command: list[str]
) -> None:
    (run_dir / "run.json").write_text(text)
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {Path('runs') / 'r' / 'run.json'} is damaged ({problem}); it is not a run's "
        "record",
        "  hint: restore it from a copy, or start a new run",
    ]


def test_a_recorded_config_that_is_not_a_mapping_is_refused(run_dir: Path) -> None:
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "interrupted", "config": 5}))
    result = CliRunner().invoke(main, ["run", "--resume", "r"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == (
        "error: run.json is damaged: its config is not a mapping, so the run cannot be resumed"
    )


def test_a_record_that_flowkit_never_writes_is_not_kept_on_resume(run_dir: Path) -> None:
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    rows = read_jsonl(run_dir / "outputs.jsonl")
    rows[1]["outputs"] = 5  # not a mapping: flowkit never writes it
    write_jsonl(run_dir / "outputs.jsonl", rows)
    resumed = flowkit.resume(run_dir)
    assert resumed.status == "completed"
    assert [r["outputs"]["y"] for r in read_jsonl(run_dir / "outputs.jsonl")] == [1, 2, 3]


def test_in_memory_rows_never_go_through_a_link_planted_at_data_jsonl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flow = python_flow(tmp_path, "def f(x):\n    return x + 1\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "data.jsonl").symlink_to(victim)
    result = flowkit.run(flow, [{"x": 1}], name="x", overwrite=True)
    assert result.status == "completed"
    assert victim.read_text() == "precious\n"
    assert not (result.run_dir / "data.jsonl").is_symlink()


@pytest.mark.parametrize("kind", ["zero", "fifo", "deep"])
def test_a_summary_json_that_is_no_small_file_is_passed_over(run_dir: Path, kind: str) -> None:
    """A run folder may come from elsewhere (committed to a repository): its summary.json as a
    link to /dev/zero ran `flowkit show` out of memory, a FIFO blocked it."""
    import os
    import resource
    import subprocess
    import sys

    from tests.support import REPO

    summary = run_dir / "summary.json"
    summary.unlink()
    if kind == "zero":
        summary.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(summary)
    else:
        summary.write_text("[" * 200_000)

    def limit() -> None:  # so that the attack fails the test, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    done = subprocess.run(
        [sys.executable, "-P", "-m", "flowkit.cli", "show", "r"],
        cwd=run_dir.parent.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )
    assert done.returncode == 0, done.stderr
    assert "slowest nodes" in done.stdout
