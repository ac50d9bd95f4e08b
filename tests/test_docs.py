"""Every command in the docs runs: README.md's and docs/*.md's fenced ``bash`` and ``python``
blocks, in order, against the offline judge; and the notebook tour under nbconvert.

A page's blocks share a temporary project (a copy of flows/, prompts/ and examples/, no
flowkit.yaml) and one environment: ``flowkit`` on PATH (this checkout's), ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` pointing at the test server this test started. A ``bash`` block runs in bash
with ``set -euo pipefail``; what it exports and the directory it ends in carry to the next
block. A ``python`` block runs in one namespace per page, so a later block sees an earlier one's
names. Blocks meant only to be read use ``shell``, ``text`` or ``yaml``; a page that does not
exist is not collected.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowkit.testing.server import LocalServer
from tests.support import REPO

FENCE = re.compile(r"^```(?P<info>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(page: Path) -> list[tuple[str, str]]:
    """The page's runnable blocks, in order: (``bash`` or ``python``, text)."""
    found = FENCE.finditer(page.read_text("utf-8"))
    return [(m["info"], m["body"]) for m in found if m["info"] in ("bash", "python")]


RUNNABLE = [p for p in PAGES if p.is_file() and blocks(p)]


@pytest.fixture
def project(
    llm_server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """A copy of the repository's flows, prompts and examples as the working directory; the
    environment the blocks run in."""
    work = tmp_path / "project"
    for folder in ("flows", "prompts", "examples"):
        shutil.copytree(REPO / folder, work / folder)
    shutil.copytree(REPO / "docs", work / "docs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "flowkit"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m flowkit.cli "$@"\n')
    shim.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": path,
        "OPENAI_BASE_URL": llm_server.base_url,
        "OPENAI_API_KEY": "sk-docs-test",
        "FLOWKIT_CACHE_DIR": str(tmp_path / "cache"),
    }
    for var in ("FLOWKIT_MODEL", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(work)
    return env


def _bash(text: str, state: Path) -> None:
    """Run one bash block after the exports and directory the earlier blocks left."""
    script = (
        "set -euo pipefail\n"
        f"[ -f {state}/exports ] && source {state}/exports\n"
        f"cd {shlex.quote(os.getcwd())}\n"
        f"{text}\n"
        f"export -p > {state}/exports\npwd > {state}/cwd\n"
    )
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=dict(os.environ), timeout=110
    )
    assert proc.returncode == 0, f"{text}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


# README's tour runs in the README's suite; the docs/ pages (about three minutes of runs on two
# cores) in .ci/run's slow stage, so the suite keeps under five minutes. A page is a dozen
# `flowkit` runs, each held to 110 s by _bash: the page as a whole is given the time of several
# (the suite's 120 s per test is a hang guard that a loaded machine reaches on a long page).
PAGE_PARAMS = [
    pytest.param(
        p, marks=[pytest.mark.timeout(900), *(() if p.name == "README.md" else [pytest.mark.slow])]
    )
    for p in RUNNABLE
]


@pytest.mark.parametrize("page", PAGE_PARAMS, ids=[str(p.relative_to(REPO)) for p in RUNNABLE])
def test_the_commands_of_the_page_run(
    page: Path, project: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for kind, text in blocks(page):
        if kind == "bash":
            _bash(text, state)
            monkeypatch.chdir((state / "cwd").read_text().strip())
        else:
            exec(compile(text, f"{page.name} python block", "exec"), namespace)


@pytest.mark.slow  # a Jupyter kernel's start-up alone takes seconds
def test_the_notebook_tour_runs_under_nbconvert(project: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("nbconvert")
    pytest.importorskip("ipykernel")
    notebook = Path("docs/notebook-tour.ipynb")  # the copy: its runs land in the project
    out = tmp_path / "executed.ipynb"
    proc = subprocess.run(
        [
            sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
            str(notebook), "--output", str(out), "--ExecutePreprocessor.timeout=100",
        ],
        capture_output=True, text=True, env=dict(os.environ), timeout=115,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert '"output_type": "error"' not in out.read_text("utf-8")
