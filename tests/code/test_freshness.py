"""A notebook never runs stale code: a module edited since it ran is imported again at the next
load or run, and its new text is what the key names; a flow brings its own modules, even when
another flow has one of the same name; modules beside the flow or on its `python_path` count."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flows
from tests.support import read_jsonl, write

FLOW = """
    name: fresh
    inputs: {x: {type: integer}}
    outputs: {y: ${n.output}, z: ${m.output}}
    nodes:
      - {name: n, type: python, function: metric:top, inputs: {x: ${inputs.x}}}
      - {name: m, type: python, function: lazymetric:lazy, inputs: {x: ${inputs.x}}}
    """
METRIC = """
    from helpers import add


    def top(x):
        return add(x)
    """
LAZY = """
    def lazy(x):
        import lazyhelp

        return lazyhelp.times(x)
    """


def _project(folder: Path, add: int = 1, times: int = 2) -> Path:
    write(folder / "metric.py", METRIC)
    write(folder / "lazymetric.py", LAZY)
    write(folder / "helpers.py", f"def add(x):\n    return x + {add}\n")
    write(folder / "lazyhelp.py", f"def times(x):\n    return x * {times}\n")
    return write(folder / "f.yaml", FLOW)


def _run(flow: Flow | Path, tmp: Path, name: str) -> dict[str, tuple[Any, bool]]:
    """Node → (its output, whether it came from the cache), for the run's one row."""
    result = flowkit.run(
        flow, [{"x": 10}], cache_dir=tmp / "cache", runs_root=tmp / "runs", name=name
    )
    return {
        t["node"]: (t.get("output"), t.get("cache_hit", False))
        for t in read_jsonl(result.run_dir / "traces.jsonl")
    }


@pytest.fixture(autouse=True)
def _forget_modules() -> Any:
    """The tests' module names are shared between tests: none may leak into the next."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name in ("metric", "lazymetric", "helpers", "lazyhelp", "libmod", "pathcode"):
            del sys.modules[name]


def test_a_flow_loaded_before_an_edit_runs_the_new_code_under_the_new_key(tmp_path: Path) -> None:
    """Edits of the same length within the same second (a .pyc would pass for fresh): the
    run detects them and loads the flow again."""
    flow = flowkit.load_flow(_project(tmp_path / "p"))
    assert _run(flow, tmp_path, "one") == {"n": (11, False), "m": (20, False)}
    assert _run(flow, tmp_path, "two") == {"n": (11, True), "m": (20, True)}
    write(tmp_path / "p" / "helpers.py", "def add(x):\n    return x + 7\n")
    assert _run(flow, tmp_path, "three") == {"n": (17, False), "m": (20, True)}
    write(tmp_path / "p" / "lazyhelp.py", "def times(x):\n    return x * 3\n")
    assert _run(flow, tmp_path, "four") == {"n": (17, True), "m": (30, False)}
    # Back to the first text: its results are the cache's again, under its own key.
    _project(tmp_path / "p")
    assert _run(flow, tmp_path, "five") == {"n": (11, True), "m": (20, True)}


def test_a_module_imported_by_the_user_before_an_edit_is_imported_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _project(tmp_path / "p")
    monkeypatch.syspath_prepend(str(tmp_path / "p"))
    import helpers  # type: ignore[import-not-found]  # as a notebook cell would

    assert helpers.add(1) == 2
    write(tmp_path / "p" / "helpers.py", "def add(x):\n    return x + 5\n")
    assert _run(path, tmp_path, "one")["n"] == (15, False)


def test_two_flows_each_run_and_fingerprint_their_own_helpers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first flow's folder stays importable (a notebook started there), so its modules stay
    loaded: the second flow still imports its own, at the top of its file and in a function."""
    first_path = _project(tmp_path / "a", add=1, times=2)
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    first = flowkit.load_flow(first_path)
    second = flowkit.load_flow(_project(tmp_path / "b", add=100, times=200))
    assert _run(first, tmp_path, "a1") == {"n": (11, False), "m": (20, False)}
    assert _run(second, tmp_path, "b1") == {"n": (110, False), "m": (2000, False)}
    assert _run(first, tmp_path, "a2") == {"n": (11, True), "m": (20, True)}
    assert _run(second, tmp_path, "b2") == {"n": (110, True), "m": (2000, True)}


def test_a_module_on_a_python_path_outside_the_flow_folder_is_fingerprinted(
    tmp_path: Path,
) -> None:
    write(tmp_path / "lib" / "libmod.py", "def scale(x):\n    return x * 2\n")
    write(
        tmp_path / "flow" / "pathcode.py",
        "def fn(x):\n    import libmod\n\n    return libmod.scale(x)\n",
    )
    path = write(
        tmp_path / "flow" / "f.yaml",
        """
        name: pp
        python_path: [../lib]
        inputs: {x: {type: integer}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, function: pathcode:fn, inputs: {x: ${inputs.x}}}
        """,
    )
    assert _run(path, tmp_path, "one") == {"n": (20, False)}
    write(tmp_path / "lib" / "libmod.py", "def scale(x):\n    return x * 9\n")
    assert _run(path, tmp_path, "two") == {"n": (90, False)}
    assert _run(path, tmp_path, "three") == {"n": (90, True)}


TWO = """
    name: {name}
    inputs: {{x: {{type: integer}}}}
    outputs: {{v: ${{n.output}}}}
    nodes:
      - {{name: n, type: python, source: node.py, function: f, inputs: {{x: ${{inputs.x}}}}}}
    """


def _same_named(work: Path) -> None:
    """Flows a/ and b/ each with their own helpers.py, imported inside the node's function."""
    for name in ("a", "b"):
        write(work / name / "f.yaml", TWO.format(name=f"flow_{name}"))
        write(work / name / "node.py", "def f(x):\n    import helpers\n\n    return helpers.v\n")
        write(work / name / "helpers.py", f"v = {name!r}\n")


def _clash(node: str, mine: str, theirs: str, who: str) -> str:
    return (
        f"{node}: module 'helpers' is {mine} here but {theirs} for {who}; one process "
        "holds one module of a name, so one of them would run the other's code: rename one of "
        "them, or move each into a package of a name of its own (a folder with an "
        "__init__.py: from mypackage import helpers)"
    )


def test_flows_run_together_that_bring_one_module_name_twice_are_refused(workdir: Path) -> None:
    _same_named(workdir)
    with pytest.raises(flowkit.ValidationError) as err:
        load_flows(["a/f.yaml", "b/f.yaml"])  # `flowkit run a/f.yaml b/f.yaml`
    assert [str(d) for d in err.value.diagnostics] == [
        _clash("b/f.yaml:5: node 'n'", "b/helpers.py", "a/helpers.py", "node 'n' (a/f.yaml:5)")
    ]
    write(
        workdir / "suite.yaml",
        """
        name: suite
        inputs: {x: {type: integer}}
        outputs: {a: "${a.output.v}", b: "${b.output.v}"}
        nodes:
          - {name: a, type: flow, flow: a/f.yaml, inputs: {x: "${inputs.x}"}}
          - {name: b, type: flow, flow: b/f.yaml, inputs: {x: "${inputs.x}"}}
        """,
    )
    with pytest.raises(flowkit.ValidationError) as err:
        flowkit.load_flow("suite.yaml")
    assert [str(d) for d in err.value.diagnostics] == [
        _clash("b/f.yaml:5: node 'n'", "b/helpers.py", "a/helpers.py", "node 'n' (a/f.yaml:5)")
    ]
    # Each on its own (one after the other in one process) runs its own helpers.
    for name in ("a", "b"):
        result = flowkit.run(f"{name}/f.yaml", [{"x": 1}], cache_dir="c", name=name)
        assert [r["outputs"]["v"] for r in result.rows()] == [name]


def test_a_target_and_its_metric_flow_bringing_one_module_name_twice_are_refused(
    workdir: Path,
) -> None:
    _same_named(workdir)
    write(workdir / "app.py", "def app(question):\n    import helpers\n\n    return helpers.v\n")
    write(workdir / "helpers.py", "v = 'app'\n")
    write(
        workdir / "a" / "metric.yaml",
        """
        name: metric
        inputs: {answer: {type: string}}
        outputs: {v: "${n.output}"}
        nodes:
          - {name: n, type: python, source: node.py, function: f, inputs: {x: "${inputs.answer}"}}
        """,
    )
    with pytest.raises(flowkit.ValidationError) as err:
        flowkit.run("a/metric.yaml", [{"question": "q"}], target="app.py:app", cache_dir="c")
    assert [str(d) for d in err.value.diagnostics] == [
        _clash("a/metric.yaml:5: node 'n'", "a/helpers.py", "helpers.py", "--target 'app.py:app'")
    ]


def test_flows_that_carry_the_same_text_under_one_module_name_run_together(
    workdir: Path,
) -> None:
    # Prompt Flow folders often each carry the same utils.py: either copy runs the same code.
    _same_named(workdir)
    write(workdir / "b" / "helpers.py", "v = 'a'\n")  # b's copy now holds a's text
    flow = load_flows(["a/f.yaml", "b/f.yaml"])
    result = flowkit.run(flow, [{"x": 1}], cache_dir="c", name="both")
    assert [r["outputs"] for r in result.rows()] == [{"flow_a": {"v": "a"}, "flow_b": {"v": "a"}}]


NS_CODE = "from nsp import mod\n\n\ndef f(x):\n    return mod.get() + x\n"
NS_LAYOUTS = {
    # nsp/ has no __init__.py: a namespace package, which keeps `mod` and `leaf` as attributes.
    "namespace": {"nsp/mod.py": "from . import leaf\n\n\ndef get():\n    return leaf.V\n"},
    "nested_namespace": {
        "nsp/mod.py": "from nsp.inner import leaf\n\n\ndef get():\n    return leaf.V\n"
    },
    "regular": {
        "nsp/__init__.py": "",
        "nsp/mod.py": "from . import leaf\n\n\ndef get():\n    return leaf.V\n",
    },
}


@pytest.mark.parametrize("on_path", [True, False], ids=["folder_on_path", "folder_off_path"])
@pytest.mark.parametrize("layout", sorted(NS_LAYOUTS))
def test_a_module_of_a_package_edited_after_it_ran_runs_its_new_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, on_path: bool
) -> None:
    """In one process (a notebook): run, edit the leaf module a package's module imports, run
    again. A package (a namespace package too) holding the old module as an attribute must not
    hand it out again, or the old result is stored under the new text's key (and a later CLI
    run reads it)."""
    folder = tmp_path / "p"
    leaf = "nsp/inner/leaf.py" if layout == "nested_namespace" else "nsp/leaf.py"
    for name, text in {**NS_LAYOUTS[layout], "code.py": NS_CODE, leaf: "V = 1\n"}.items():
        write(folder / name, text)
    path = write(
        folder / "f.yaml",
        """
        name: ns
        inputs: {x: {type: integer}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, source: code.py, function: f, inputs: {x: ${inputs.x}}}
        """,
    )
    if on_path:  # a script or notebook started in the flow's folder
        monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    try:
        flow = flowkit.load_flow(path)
        assert _run(flow, tmp_path, "one") == {"n": (11, False)}
        write(folder / leaf, "V = 2\n")  # same length, same second
        assert _run(flow, tmp_path, "two") == {"n": (12, False)}
        for name in [n for n in sys.modules if n == "nsp" or n.startswith("nsp.")]:
            del sys.modules[name]  # a new process: the CLI
        assert _run(path, tmp_path, "three") == {"n": (12, True)}
    finally:
        for name in set(sys.modules) - before:
            if name == "nsp" or name.startswith("nsp."):
                del sys.modules[name]


def test_a_package_dropped_for_a_stale_module_takes_its_loaded_submodules_along(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package imported again lacks the attributes of submodules left loaded: `import pk.b`
    would then find `pk.b` in sys.modules and never set `pk.b`, so `pk.b.W` fails."""
    from flowkit.code import freshness

    write(tmp_path / "pk" / "__init__.py", "from . import a\n")
    write(tmp_path / "pk" / "a.py", "V = 1\n")
    write(tmp_path / "pk" / "b.py", "W = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import pk.b  # type: ignore[import-not-found]  # the user's own, unrelated import

        write(tmp_path / "pk" / "a.py", "V = 2\n")
        freshness.forget_stale([tmp_path / "pk" / "__init__.py", tmp_path / "pk" / "a.py"])
        import pk.b  # noqa: F811  # as the user's code does again

        assert (pk.a.V, pk.b.W) == (2, 1)
    finally:
        for name in [n for n in sys.modules if n == "pk" or n.startswith("pk.")]:
            del sys.modules[name]


def test_the_modules_of_one_installed_folder_cost_one_resolve_and_a_link_is_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every import while a flow runs passes the recording finder (an SDK's hundreds of modules
    # in a one-row llm run): whether a file is the user's is asked of its folder once. A file
    # that is a link into the user's project is still recorded as the user's code.
    import importlib

    from flowkit.code import freshness

    project, installed = tmp_path / "proj", tmp_path / "env" / "site-packages"
    write(project / "linkedcode.py", "VALUE = 1\n")
    names = [f"instmod{i}" for i in range(8)]
    for name in names:
        write(installed / f"{name}.py", "VALUE = 2\n")
    (installed / "linkedmod.py").symlink_to(project / "linkedcode.py")
    resolved: list[str] = []
    real = Path.resolve

    def counted(self: Path, strict: bool = False) -> Path:
        resolved.append(str(self))
        return real(self, strict)

    monkeypatch.syspath_prepend(str(installed))
    monkeypatch.setattr(Path, "resolve", counted)
    try:
        with freshness.watching([str(project)]):
            resolved.clear()
            for name in names:
                importlib.import_module(name)
            in_folder = [p for p in resolved if p.startswith(str(installed))]
            importlib.import_module("linkedmod")
        assert len(in_folder) == 1, in_folder
        assert freshness.ran_digest(real(installed / "linkedmod.py")) is not None
        assert freshness.ran_digest(real(installed / "instmod0.py")) is None
    finally:
        for name in [*names, "linkedmod"]:
            sys.modules.pop(name, None)
