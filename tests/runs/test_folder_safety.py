"""Run folders are never clobbered: an existing run needs --overwrite, a folder being written
is locked, planted links are not followed, and --name never leaves runs/."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from tests.support import python_flow, read_json, start_flowkit, write, write_jsonl


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # A row with x=1 holds its run until the test creates `release`: a run that is being
    # written stays so for as long as the test needs, however loaded the machine.
    python_flow(
        tmp_path,
        "import os, time\n\ndef f(x):\n    while x and not os.path.exists('release'):\n"
        "        time.sleep(0.02)\n    return x\n",
    )
    write_jsonl(tmp_path / "d.jsonl", [{"x": 0} for _ in range(3)])
    write_jsonl(tmp_path / "slow.jsonl", [{"x": 1}])
    return tmp_path


def _run(work: Path, *args: str, data: str = "d.jsonl") -> tuple[int, str, str]:
    """`flowkit run` in this process: the refusals below need no process of their own (the
    tests of two processes at one folder start real ones)."""
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = CliRunner().invoke(
            main, ["run", "t.yaml", "--data", data, "--no-cache", "-q", *args]
        )
    finally:
        os.chdir(cwd)
    return result.exit_code, result.stdout, result.stderr


def test_output_refuses_a_folder_with_a_run_unless_overwrite(project: Path) -> None:
    assert _run(project, "--output", "out")[0] == 0
    code, _, err = _run(project, "--output", "out")
    assert code == 2
    assert err.startswith("error: run folder 'out' already exists and holds a run\n")
    (project / "other").mkdir()
    (project / "other" / "notes.txt").write_text("mine")
    code, _, err = _run(project, "--output", "other")
    assert (code, err.splitlines()[0]) == (
        2,
        "error: run folder 'other' already exists and is not empty",
    )
    code, _, err = _run(project, "--output", "out", "--overwrite")
    assert code == 0, err
    assert read_json(project / "out" / "run.json")["status"] == "completed"


def test_a_folder_being_written_is_locked(project: Path) -> None:
    first = start_flowkit(
        project, "run", "t.yaml", "--data", "slow.jsonl", "--no-cache", "-q", "--output", "busy"
    )
    try:
        while not (project / "busy" / "run.json").exists():
            assert first.poll() is None, first.communicate()
            time.sleep(0.02)
        proc = start_flowkit(
            project, "run", "t.yaml", "--data", "d.jsonl", "-q", "--output", "busy", "--overwrite"
        )
        _, err = proc.communicate(timeout=120)
        code = proc.returncode
        assert code == 2
        assert err.startswith("error: run folder 'busy' is being written by another run\n")
    finally:
        (project / "release").touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err
    assert read_json(project / "busy" / "run.json")["counts"]["succeeded"] == 1


def test_planted_links_are_not_followed(project: Path) -> None:
    assert _run(project, "--output", "out")[0] == 0
    victim = project / "victim.txt"
    victim.write_text("precious")
    for name in ("run.json.tmp", "outputs.jsonl", "traces.jsonl", "metrics.json.tmp"):
        target = project / "out" / name
        target.unlink(missing_ok=True)
        target.symlink_to(victim)
    code, _, err = _run(project, "--output", "out", "--overwrite")
    assert code == 0, err
    assert victim.read_text() == "precious"
    assert not (project / "out" / "outputs.jsonl").is_symlink()


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "a/b", "..", ""])
def test_names_that_leave_runs_are_refused(project: Path, name: str) -> None:
    code, _, err = _run(project, "--name", name)
    assert code == 2
    assert err.startswith(
        f"error: --name {name!r} must be a plain folder name (no '/', '..' or absolute path, "
        "at most 255 bytes)\n"
    )
    assert not (project.parent / "x").exists()


def test_output_under_a_file_is_a_one_line_error(project: Path) -> None:
    (project / "file").write_text("")
    code, _, err = _run(project, "--output", "file/sub")
    assert code == 2
    assert err.startswith("error: a parent of the run folder 'file' is a file, not a folder\n")


def test_two_runs_started_together_with_one_name(project: Path) -> None:
    # A module that takes a second to import lines the three runs up: started a few
    # milliseconds apart, they reach the folder at about the same moment.
    write(project / "m.py", "import time\n\ntime.sleep(1)\n\ndef f(x):\n    return x\n")
    args = ("run", "t.yaml", "--data", "d.jsonl", "--no-cache", "-q", "--name", "same")
    procs = [start_flowkit(project, *args) for _ in range(3)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    assert sorted(code for code, _ in results) == [0, 2, 2]
    for code, err in results:
        assert "Traceback" not in err
        if code == 2:
            assert err.startswith(
                (
                    "error: run folder 'runs/same' is being written by another run\n",
                    "error: run folder 'runs/same' already exists and holds a run\n",
                )
            ), err


def test_rows_are_on_disk_before_the_aggregates_run(tmp_path: Path) -> None:
    # The aggregate counts what a kill at this moment would leave on disk.
    python_flow(
        tmp_path,
        "from pathlib import Path\n\ndef f(x):\n    return x\n\n"
        "def seen(ys):\n"
        "    run = Path('runs/r')\n"
        "    rows = (run / 'outputs.jsonl').read_text().count('\\n')\n"
        "    traces = (run / 'traces.jsonl').read_text().count('\\n')\n"
        "    return {'rows_on_disk': rows, 'traces_on_disk': traces}\n",
        "seen",
    )
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(50)])
    code, out, err = _run(tmp_path, "--name", "r")
    assert code == 0, out + err
    assert read_json(tmp_path / "runs" / "r" / "metrics.json") == {
        "t.rows_on_disk": 50,
        "t.traces_on_disk": 50,
    }


def test_two_ctrl_c_during_aggregation_exit_130_and_mark_the_run(tmp_path: Path) -> None:
    import signal

    python_flow(
        tmp_path,
        "import time\nfrom pathlib import Path\n\ndef f(x):\n    return x\n\n"
        "def slow(ys):\n    Path('aggregating').touch()\n"
        "    time.sleep(30)\n"
        "    return {'n': len(ys)}\n",
        "slow",
    )
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(20_000)])
    proc = start_flowkit(tmp_path, "run", "t.yaml", "--data", "d.jsonl", "--name", "r", "-q")
    # However long the rows take on a loaded machine: the signals must land in the aggregate.
    while not (tmp_path / "aggregating").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    # Ctrl-C held down: the first stops the aggregate, the rest land wherever the run is then,
    # closing its folder included.
    end = time.monotonic() + 0.5
    while proc.poll() is None and time.monotonic() < end:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.002)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Aborted!" not in err and "Traceback" not in err
    info = read_json(tmp_path / "runs" / "r" / "run.json")
    assert info["status"] == "interrupted"
    assert info["counts"]["rows"] == 20_000
