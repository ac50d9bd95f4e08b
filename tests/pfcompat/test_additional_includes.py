"""Prompt Flow's `additional_includes:`: the listed files and folders are available to the
flow's tools as if copied beside flow.dag.yaml (a tool's source path, and its imports)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, read_jsonl, write, write_jsonl

DAG = """
inputs:
  x: {type: string}
outputs:
  y: {type: string, reference: ${shout.output}}
nodes:
- name: shout
  type: python
  source: {type: code, path: tools/shout_tool.py}
  inputs: {x: ${inputs.x}}
additional_includes:
- ../common/helper.py
- ../common/tools
"""
TOOL = """
from promptflow import tool
from helper import loud


@tool
def shout(x: str) -> str:
    return loud(x)
"""


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_included_files_and_folders_serve_the_flows_tools(tmp_path: Path) -> None:
    write(tmp_path / "common" / "helper.py", "def loud(x):\n    return x.upper() + '!'\n")
    write(tmp_path / "common" / "tools" / "shout_tool.py", TOOL)
    write(tmp_path / "pf" / "flow.dag.yaml", DAG)
    write_jsonl(tmp_path / "rows.jsonl", [{"x": "hi"}, {"x": "yo"}])
    done = _cli(tmp_path, "run", "pf", "--data", "rows.jsonl", "--name", "r", "-q")
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(tmp_path / "runs" / "r" / "outputs.jsonl")
    assert [r["outputs"]["y"] for r in rows] == ["HI!", "YO!"]


def test_a_missing_include_is_an_error_at_its_line(tmp_path: Path) -> None:
    write(tmp_path / "common" / "tools" / "shout_tool.py", TOOL)
    write(tmp_path / "pf" / "flow.dag.yaml", DAG)
    done = _cli(tmp_path, "validate", "pf")
    assert done.returncode == 2
    assert done.stderr.splitlines()[1] == (
        f"{Path('pf') / 'flow.dag.yaml'}:11: unable to find additional include "
        "'../common/helper.py'"
    )
