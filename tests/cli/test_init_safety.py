"""`flowkit init` checks everything before it writes anything, and never writes through a link."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def _init(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowkit.cli", "init", "proj"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_file_where_a_folder_goes_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "prompts").write_text("notes\n")
    done = _init(tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "error: proj already has prompts (not a folder); nothing was written"
    )
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in project.iterdir()) == ["prompts"]


def test_a_dangling_link_is_refused_never_written_through(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    target = tmp_path / "elsewhere.jsonl"
    (project / "data.jsonl").symlink_to(target)
    done = _init(tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "error: proj already has data.jsonl (a link); nothing was written"
    )
    assert not target.exists()
    assert sorted(p.name for p in project.iterdir()) == ["data.jsonl"]
