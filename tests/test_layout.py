"""The package layout holds: few top-level modules, a map in every package, imports that point one
way (no cycle among modules at import time), no class that exists only to be one other's base."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import flowkit
from flowkit.code.fingerprint import MOVED_MODULES, load_function

PACKAGE = Path(flowkit.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _top_level_imports(path: Path, name: str, is_package: bool) -> set[str]:
    """Modules imported when ``name`` is imported: module level, outside TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    base = name if is_package else name.rpartition(".")[0]

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                found.update(a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                module = stmt.module or ""
                if stmt.level:
                    anchor = base.split(".")[: len(base.split(".")) - stmt.level + 1]
                    module = ".".join([*anchor, module] if module else anchor)
                found.add(module)
                found.update(f"{module}.{a.name}" for a in stmt.names)
            elif isinstance(stmt, ast.If):
                test = ast.unparse(stmt.test)
                if "TYPE_CHECKING" not in test and "__main__" not in test:
                    visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body)
                for handler in stmt.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


def _import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _top_level_imports(path, name, path.name == "__init__.py"):
            if target in modules and target != name:
                graph.add_edge(name, target)
    return graph


def test_no_import_cycle_among_modules() -> None:
    cycles = list(nx.simple_cycles(_import_graph()))
    assert cycles == []


def test_packages_import_one_way() -> None:
    """Package to package, the arrows go from the CLI down to the flow definition."""
    order = [
        "errors",
        "cache",
        "code",
        "flow",
        "llm",
        "metrics",
        "kinds",
        "engine",
        "batch",
        "data",
        "runs",
        "labels",
        "inspect",
        "review",
        "api",
        "cli",
    ]
    rank = {name: i for i, name in enumerate(order)}
    upward = []
    for a, b in _import_graph().edges:
        pa, pb = (m.split(".")[1] if "." in m else "" for m in (a, b))
        if pa in rank and pb in rank and rank[pb] > rank[pa]:
            upward.append((a, b))
    assert upward == []


def test_at_most_four_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 4, top


def test_every_package_has_a_map() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent.name in ("builtin_flows", "prompts"):
            continue
        doc = ast.get_docstring(ast.parse(init.read_text("utf-8")))
        assert doc and len(doc.splitlines()) >= 3, f"{init} needs a docstring map"


def test_no_class_is_only_one_others_base() -> None:
    """A base with one subclass that is never used on its own (never constructed) is one class
    split in two; a base that is also a value in its own right (constructed) is a concept."""
    bases: dict[str, list[str]] = {}
    defined: set[str] = set()
    constructed: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                defined.add(node.name)
                for base in node.bases:
                    bases.setdefault(ast.unparse(base).split(".")[-1], []).append(node.name)
            elif isinstance(node, ast.Call):
                constructed.add(ast.unparse(node.func).split(".")[-1])
    lonely = {
        b: subs
        for b, subs in bases.items()
        if b in defined and len(subs) == 1 and b not in constructed
    }
    # Exceptions are the one place a single subclass is its own concept (a more specific error).
    lonely = {b: s for b, s in lonely.items() if not b.endswith(("Error", "Exception", "Problem"))}
    assert lonely == {}


def test_the_old_flat_paths_of_public_functions_still_resolve() -> None:
    for old, new in MOVED_MODULES.items():
        assert old.count(".") == 1 and new.startswith("flowkit.")
    assert load_function("flowkit.aggregate:score_summary", None, PACKAGE).__module__ == (
        "flowkit.metrics.aggregate"
    )
    assert load_function("flowkit.textmetrics:f1_score", None, PACKAGE).__module__ == (
        "flowkit.metrics.text"
    )


MAX_MODULE_LINES = 400


def test_modules_stay_small() -> None:
    """A module past about 400 lines holds more than one concept: move one into its own."""
    over = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text("utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert over == {}


def test_every_package_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages (an editable install finds any folder; a wheel holds
    only those listed): a package left out works from a clone and is missing once installed."""
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text("utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    # The `promptflow` stand-in ships as package data of flowkit.pfcompat (see pyproject.toml).
    found = {
        ".".join(p.parent.relative_to(PACKAGE.parent).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "shim" not in p.relative_to(PACKAGE).parts
    }
    assert found - listed == set()
