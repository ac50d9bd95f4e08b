"""Inspecting a flow never runs it: `validate`, `describe` and `convert` read a flow's Python
from its source (``ast``) and import nothing of it, flowkit's own flows and Prompt Flow folders
alike; their messages are the ones an import gives; `run` still imports and runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowkit.errors import ValidationError
from flowkit.flow.loader import load_flow
from tests.support import REPO, write, write_jsonl

MODULE = """
from pathlib import Path

Path(__file__).with_name("MARKER").write_text("ran")


def f(x, scale=2):
    return x * scale


async def g(x, *, k):
    return x
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


def _flow(folder: Path, node: str) -> Path:
    write(folder / "m.py", MODULE)
    return write(
        folder / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\noutputs: {y: ${n.output}}\nnodes:\n"
        f"  - {{name: n, type: python, {node}}}\n",
    )


GOOD = "source: m.py, function: f, inputs: {x: ${inputs.x}}"


@pytest.mark.slow  # four flowkit processes
def test_validate_describe_and_convert_never_run_the_flows_code(tmp_path: Path) -> None:
    _flow(tmp_path, GOOD)
    marker = tmp_path / "MARKER"
    done = _cli(tmp_path, "validate", "t.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok: t.yaml (t, 1 nodes)"
    assert _cli(tmp_path, "describe", "t.yaml").returncode == 0
    assert not marker.exists()
    write_jsonl(tmp_path / "rows.jsonl", [{"x": 3}])
    ran = _cli(tmp_path, "run", "t.yaml", "--data", "rows.jsonl", "--name", "r", "-q")
    assert ran.returncode == 0, ran.stderr
    assert marker.exists()  # a run imports and runs it, as ever


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        ("source: m.py, function: h, inputs: {x: ${inputs.x}}", "m.py has no function 'h'"),
        (
            "source: m.py, function: ff, inputs: {x: ${inputs.x}}",
            "m.py has no function 'ff' (did you mean 'f'?)",
        ),
        ("source: nope.py, function: f, inputs: {}", "source file 'nope.py' does not exist"),
        (
            "source: m.py, function: f, inputs: {x: ${inputs.x}, scael: 3}",
            "input 'scael' is not a parameter of f (did you mean 'scale'?)",
        ),
        ("function: m:f, inputs: {x: ${inputs.x}, y: 1}", "input 'y' is not a parameter of m:f"),
        ("function: m:g, inputs: {x: ${inputs.x}, q: 1}", "input 'q' is not a parameter of m:g"),
    ],
)
def test_inspection_reports_what_an_import_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, problem: str
) -> None:
    from flowkit.code.static import inspect_only

    monkeypatch.chdir(tmp_path)
    flow = _flow(tmp_path, node)
    with inspect_only(), pytest.raises(ValidationError) as inspected:
        load_flow(flow)
    assert not (tmp_path / "MARKER").exists()
    assert [d.message for d in inspected.value.diagnostics] == [problem]
    with pytest.raises(ValidationError) as imported:
        load_flow(flow)
    assert [d.message for d in imported.value.diagnostics] == [problem]


DAG = """
inputs:
  x: {type: string}
outputs:
  y: {type: string, reference: ${a.output}}
nodes:
- name: a
  type: python
  source: {type: code, path: tool.py}
  inputs: {x: ${inputs.x}}
"""
TOOL = """
from pathlib import Path
from promptflow import tool

Path(__file__).with_name("MARKER").write_text("ran")


@tool
def echo(x: str) -> str:
    return x
"""


@pytest.mark.slow  # two flowkit processes
def test_a_prompt_flow_folder_is_validated_and_converted_without_running_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "pf"
    write(folder / "flow.dag.yaml", DAG)
    write(folder / "tool.py", TOOL)
    done = _cli(tmp_path, "validate", "pf")
    assert done.returncode == 0, done.stderr
    converted = _cli(tmp_path, "convert", "pf", "-o", "out/flow.yaml")
    assert converted.returncode == 0, converted.stderr
    assert (tmp_path / "out" / "flow.yaml").is_file()
    assert not (folder / "MARKER").exists()
