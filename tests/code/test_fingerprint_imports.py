"""The code fingerprint follows what a function imports from the user's project (and flowkit's
version); the flow's folder is importable; nodes declare environment variables for their key."""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.code import imports
from flowkit.code.fingerprint import code_fingerprint, load_from_folder
from flowkit.metrics import scores
from tests.support import read_jsonl, start_flowkit, write, write_jsonl

FLOW = """
    name: imp
    inputs: {x: {type: integer}}
    outputs: {y: ${n.output}, z: ${m.output}, w: ${e.output}}
    nodes:
      - {name: n, type: python, function: mymetrics:fn, inputs: {x: ${inputs.x}}}
      - {name: m, type: python, source: src.py, function: g, inputs: {x: ${inputs.x}}}
      - name: e
        type: python
        source: src.py
        function: env
        inputs: {x: ${inputs.x}}
        cache: {env: [FLOWKIT_TEST_VAR]}
    """


def _edit(path: Path, text: str) -> None:
    """Rewrite a file so its mtime moves on even within one clock tick."""
    write(path, text)
    stamp = time.time() + 5
    os.utime(path, (stamp, stamp))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "f.yaml", FLOW)
    write(
        tmp_path / "mymetrics.py", "from helper import mult\n\ndef fn(x):\n    return x * mult()\n"
    )
    write(
        tmp_path / "src.py",
        "import os\n\ndef g(x):\n    import helpers2\n    return helpers2.add(x)\n\n"
        "def env(x):\n    return os.environ.get('FLOWKIT_TEST_VAR')\n",
    )
    write(tmp_path / "helper.py", "def mult():\n    return 3\n")
    write(tmp_path / "helpers2.py", "def add(x):\n    return x + 1\n")
    write_jsonl(tmp_path / "d.jsonl", [{"x": 1}])
    return tmp_path


def _run(cwd: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> dict:
    args = ["run", "f.yaml", "--data", "d.jsonl", "--cache-dir", "c", "--name", name, "-q"]
    proc = start_flowkit(cwd, *(extra or args), env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    return read_jsonl(cwd / "runs" / name / "outputs.jsonl")[0]["outputs"]


def test_an_edited_helper_module_misses_the_cache(project: Path) -> None:
    env = {"FLOWKIT_TEST_VAR": "a"}
    assert _run(project, "one", env=env) == {"y": 3, "z": 2, "w": "a"}
    _edit(project / "helper.py", "def mult():\n    return 300\n")
    _edit(project / "helpers2.py", "def add(x):\n    return x + 100\n")
    assert _run(project, "two", env=env) == {"y": 300, "z": 101, "w": "a"}
    # A declared environment variable is part of the key; nothing else changed, so y and z hit.
    assert _run(project, "three", env={"FLOWKIT_TEST_VAR": "b"}) == {"y": 300, "z": 101, "w": "b"}


def test_resume_refuses_a_run_whose_helper_changed(project: Path) -> None:
    _run(project, "one")
    _edit(project / "helper.py", "def mult():\n    return 4\n")
    proc = start_flowkit(project, "run", "--resume", "runs/one")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "error: run 'one': flow 'imp' changed since the run (nodes, prompts or code)" in err


def test_a_built_in_metric_follows_the_flowkit_modules_it_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = code_fingerprint(scores.parse_score)
    monkeypatch.setattr(flowkit, "__version__", "999")
    assert code_fingerprint(scores.parse_score) != before


def test_load_from_folder_makes_the_folder_importable_and_fingerprints_it(project: Path) -> None:
    loaded = load_from_folder(project, "fn", "mymetrics.py")
    assert loaded.fn(2) == 6
    again = load_from_folder(project, "fn", "mymetrics.py")
    assert again.fingerprint == loaded.fingerprint
    _edit(project / "helper.py", "def mult():\n    return 5\n")
    assert load_from_folder(project, "fn", "mymetrics.py").fingerprint != loaded.fingerprint


def _ast_imports(path: Path) -> set[tuple[str, int]]:
    """What a full parse finds: the reference the fast scan must never fall short of."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found.update((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.add((base, node.level))
            found.update(
                (f"{base}.{a.name}" if base else a.name, node.level)
                for a in node.names
                if a.name != "*"
            )
    return found


def test_the_import_scan_reads_every_form(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    write(
        source,
        "import a.b as c, d  # comment\n"
        "from . import sib\n"
        "from ..up.mod import (  # why (a parenthesis in a comment)\n"
        "    x,  # one\n"
        "    y as z,\n"
        ")\n"
        "from e import \\\n    f\n"
        "import g; h = 1\n"
        "from star import *\n"
        "def fn():\n"
        "    if True:\n"
        "        import lazy.inner\n",
    )
    found = set(imports._imports(str(source), 0))
    assert found == _ast_imports(source)
    assert ("up.mod.y", 2) in found and ("lazy.inner", 0) in found


def test_the_import_scan_finds_all_that_a_parse_finds_in_flowkit() -> None:
    package = Path(flowkit.__file__).parent
    for path in sorted(package.rglob("*.py")):
        assert _ast_imports(path) <= set(imports._imports(str(path), 0)), path


def test_a_module_imported_by_a_literal_name_counts(tmp_path: Path) -> None:
    write(
        tmp_path / "dyn.py",
        "import importlib\n\n\ndef fn(x):\n    return importlib.import_module('ki_dyn').v\n",
    )
    write(tmp_path / "ki_dyn.py", "v = 1\n")
    before = load_from_folder(tmp_path, "fn", "dyn.py").fingerprint
    _edit(tmp_path / "ki_dyn.py", "v = 2\n")
    assert load_from_folder(tmp_path, "fn", "dyn.py").fingerprint != before


def test_imports_after_a_semicolon_through___import___and_a_relative_import_module_count(
    tmp_path: Path,
) -> None:
    write(tmp_path / "nb.py", "import json; import ki_semi\n\n\ndef fn(x):\n    return 1\n")
    write(tmp_path / "nd.py", "def fn(x):\n    return __import__('ki_dunder').v\n")
    write(tmp_path / "ki_pkg" / "__init__.py", "")
    write(
        tmp_path / "ki_pkg" / "nc.py",
        "import importlib\n\n\ndef fn(x):\n"
        "    return importlib.import_module('.ki_rel', __package__).v\n",
    )
    for name in ("ki_semi.py", "ki_dunder.py", "ki_pkg/ki_rel.py"):
        write(tmp_path / name, "v = 1\n")
    reached = {
        start: {
            p.relative_to(tmp_path).as_posix()
            for p in imports.project_files(tmp_path / start, (tmp_path,))
        }
        for start in ("nb.py", "nd.py", "ki_pkg/nc.py")
    }
    assert reached == {
        "nb.py": {"nb.py", "ki_semi.py"},
        "nd.py": {"nd.py", "ki_dunder.py"},
        "ki_pkg/nc.py": {"ki_pkg/nc.py", "ki_pkg/ki_rel.py"},
    }


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A package outside the flow's folder and python_path, importable as a PYTHONPATH folder
    or an editable install's finder makes it; dropped from sys.modules afterwards."""
    yield tmp_path / "ext"
    for name in [n for n in sys.modules if n.split(".")[0] in ("ki_ext", "ki_edit")]:
        del sys.modules[name]


def _ext_flow(root: Path, module: str) -> Path:
    write(
        root / "flow" / "node.py",
        f"from {module}.score import val\n\n\ndef fn(x):\n    return val()\n",
    )
    return write(
        root / "flow" / "f.yaml",
        """
        name: ext
        inputs: {x: {type: integer}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, source: node.py, function: fn, inputs: {x: ${inputs.x}}}
        """,
    )


def _ext_run(path: Path, tmp: Path, name: str) -> tuple[Any, bool]:
    result = flowkit.run(
        path, [{"x": 1}], cache_dir=tmp / "cache", runs_root=tmp / "runs", name=name
    )
    trace = read_jsonl(result.run_dir / "traces.jsonl")[0]
    return trace.get("output"), trace.get("cache_hit", False)


def test_a_package_on_pythonpath_outside_the_project_is_keyed_by_its_text(
    outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = outside.parent
    write(outside / "ki_ext" / "__init__.py", "")
    write(outside / "ki_ext" / "score.py", "def val():\n    return 'v1'\n")
    monkeypatch.syspath_prepend(str(outside))
    path = _ext_flow(root, "ki_ext")
    assert _ext_run(path, root, "one") == ("v1", False)
    assert _ext_run(path, root, "two") == ("v1", True)
    write(outside / "ki_ext" / "score.py", "def val():\n    return 'v2'\n")
    assert _ext_run(path, root, "three") == ("v2", False)


class _EditableFinder(importlib.abc.MetaPathFinder):
    """What ``pip install -e`` installs with setuptools: a finder that maps a top-level name to
    the project's source folder (no sys.path entry)."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name, self.folder = name, folder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        init = self.folder / "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(self.folder)]
        )


def test_an_editable_install_is_keyed_by_its_text(
    outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = outside.parent
    write(outside / "src" / "ki_edit" / "__init__.py", "")
    write(outside / "src" / "ki_edit" / "score.py", "def val():\n    return 'e1'\n")
    finder = _EditableFinder("ki_edit", outside / "src" / "ki_edit")
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    path = _ext_flow(root, "ki_edit")
    assert _ext_run(path, root, "one") == ("e1", False)
    write(outside / "src" / "ki_edit" / "score.py", "def val():\n    return 'e2'\n")
    assert _ext_run(path, root, "two") == ("e2", False)
    assert _ext_run(path, root, "three") == ("e2", True)


def test_installed_modules_and_flowkits_own_are_pinned_not_followed(tmp_path: Path) -> None:
    import msgspec

    start = write(
        tmp_path / "n.py", "import json\nimport msgspec\nfrom flowkit.errors import display\n"
    )
    assert imports.project_files(start, (tmp_path,)) == [start.resolve()]
    assert imports.is_installed(Path(json.__file__).resolve())
    assert imports.is_installed(Path(msgspec.__file__).resolve())
    assert not imports.is_user_code(Path(flowkit.__file__).resolve())
    assert imports.is_user_code(start.resolve())
