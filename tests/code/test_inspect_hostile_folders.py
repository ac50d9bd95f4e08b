"""Inspecting a flow in a hostile folder never runs it: a module there named like one that
flowkit's or the standard library's code looks for only on some systems (``subprocess`` tries
``msvcrt``), or a flow kept in a folder that is named ``site-packages`` (as if installed).

The CLI runs with ``python -P``: the ``flowkit`` command does not put the working folder on
sys.path, and neither does ``-P`` (``python -m`` alone would, whatever flowkit does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.code.test_inspect_only import DAG, GOOD, MODULE, TOOL, _flow
from tests.support import REPO, write

pytestmark = pytest.mark.slow  # a flowkit process per command

DECOY = 'from pathlib import Path\nPath(__file__).with_name("DECOY_RAN").write_text("ran")\n'


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "flowkit.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_module_named_as_an_optional_import_never_runs(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    _flow(folder, GOOD)
    write(folder / "msvcrt.py", DECOY)  # it ran as flowkit's kinds imported asyncio
    for command in ("validate", "describe"):
        done = _cli(tmp_path, command, "repo/t.yaml")
        assert done.returncode == 0, done.stderr
    assert not (folder / "DECOY_RAN").exists()
    assert not (folder / "MARKER").exists()


def test_a_prompt_flow_folder_with_such_a_module_never_runs_it(tmp_path: Path) -> None:
    folder = tmp_path / "pf"
    write(folder / "flow.dag.yaml", DAG)
    write(folder / "tool.py", TOOL)
    write(folder / "msvcrt.py", DECOY)
    assert _cli(tmp_path, "validate", "pf").returncode == 0
    converted = _cli(tmp_path, "convert", "pf", "-o", "out/flow.yaml")
    assert converted.returncode == 0, converted.stderr
    assert not (folder / "DECOY_RAN").exists()
    assert not (folder / "MARKER").exists()


def test_a_flow_in_a_folder_named_site_packages_is_read_not_imported(tmp_path: Path) -> None:
    folder = tmp_path / "site-packages" / "flows"
    write(folder / "m.py", MODULE)
    write(
        folder / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\noutputs: {y: ${n.output}}\nnodes:\n"
        "  - {name: n, type: python, function: 'm:f', inputs: {x: ${inputs.x}, nope: 1}}\n",
    )
    done = _cli(folder, "validate", "t.yaml")
    assert not (folder / "MARKER").exists()  # it was imported as an installed module's
    assert done.returncode != 0
    assert "nope" in done.stderr  # still checked against the parameters the source gives
    assert _cli(folder, "describe", "t.yaml") is not None
    assert not (folder / "MARKER").exists()
