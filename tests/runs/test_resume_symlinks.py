"""A resume never writes through a symbolic link planted in the run folder (a shared runs/
folder, an unpacked archive): every temporary file it writes is created afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import python_flow, read_jsonl, start_flowkit, write_jsonl

MODULE = """
from pathlib import Path

def f(x):
    if x % 2 and not Path("fixed").exists():
        raise ValueError("odd")
    return x
"""


@pytest.mark.slow  # two flowkit processes
@pytest.mark.parametrize("planted", ["outputs.jsonl.tmp", "traces.jsonl.tmp"])
def test_resume_never_writes_through_a_planted_link(tmp_path: Path, planted: str) -> None:
    python_flow(tmp_path, MODULE)
    write_jsonl(tmp_path / "rows.jsonl", [{"x": i} for i in range(6)])
    first = start_flowkit(tmp_path, "run", "t.yaml", "--data", "rows.jsonl", "--name", "r", "-q")
    first.communicate(timeout=120)
    run_dir = tmp_path / "runs" / "r"
    assert len([r for r in read_jsonl(run_dir / "outputs.jsonl") if r["status"] == "ok"]) == 3
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run_dir / planted).symlink_to(victim)
    (tmp_path / "fixed").touch()
    resumed = start_flowkit(tmp_path, "run", "--resume", "r", "-q")
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert victim.read_text() == "precious\n"
    assert not (run_dir / planted).is_symlink()
    rows = read_jsonl(run_dir / "outputs.jsonl")
    assert [r["status"] for r in rows] == ["ok"] * 6
