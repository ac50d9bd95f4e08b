"""Every key ingredient reruns its node when it changes, and nothing else does.

Through the public API only (``flowkit.run(..., cache_dir=...)`` and the traces' ``cache_hit``):
a project with a node of every kind runs once to fill the cache, then one thing changes and it
runs again. An ingredient (code, a helper imported at the top, in a function, through a
``python_path`` folder, inputs, spec fields, a prompt, a model, params, an embedding's text, a
sub-flow, a package on PYTHONPATH outside the project, a ``--target``'s code, state, class
attributes and defaults) must rerun its node; a setting that cannot
change a result (timeout, retries, concurrency, the connection's limits) must rerun nothing.
Each case would fail if its ingredient were left out of the key: the second run would hit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

FLOW = """
    name: keys
    python_path: [../lib]
    inputs: {x: {type: integer}, text: {type: string}}
    outputs:
      p: ${p.output}
      lazy: ${lazy.output}
      path: ${path.output}
      ext: ${ext.output}
      l: ${l.output}
      e: ${e.output}
      s: ${s.output}
    nodes:
      - {name: p, type: python, function: ki_code:fn, inputs: {x: ${inputs.x}, scale: 1}}
      - {name: lazy, type: python, function: ki_lazy:fn, inputs: {x: ${inputs.x}}}
      - {name: path, type: python, function: ki_path:fn, inputs: {x: ${inputs.x}}}
      - {name: ext, type: python, function: ki_extnode:fn, inputs: {x: ${inputs.x}}}
      - name: l
        type: llm
        prompt: ask.jinja2
        params: {temperature: 0}
        inputs: {text: ${inputs.text}}
      - {name: e, type: embedding, inputs: {text: ${inputs.text}}}
      - {name: s, type: flow, flow: sub.yaml, inputs: {x: ${inputs.x}}}
    """
SUB = """
    name: sub
    inputs: {x: {type: integer}}
    outputs: {y: ${q.output}}
    nodes:
      - {name: q, type: python, function: ki_sub:fn, inputs: {x: ${inputs.x}, add: 1}}
    """
FILES = {
    "proj/flow.yaml": FLOW,
    "proj/sub.yaml": SUB,
    "proj/ki_code.py": (
        "from ki_helper import h\n\n\ndef fn(x, scale):\n    return x * h() * scale\n\n\nfn2 = fn\n"
    ),
    "proj/ki_helper.py": "from ki_deep import d\n\n\ndef h():\n    return d()\n",
    "proj/ki_deep.py": "def d():\n    return 2\n",
    "proj/ki_lazy.py": "def fn(x):\n    import ki_lazymod\n\n    return x + ki_lazymod.k()\n",
    "proj/ki_lazymod.py": "def k():\n    return 3\n",
    "proj/ki_path.py": "def fn(x):\n    import ki_lib\n\n    return ki_lib.m(x)\n",
    "proj/ki_sub.py": "def fn(x, add):\n    return x + add\n",
    "proj/ask.jinja2": "user:\nSay something about {{ text }}.\n",
    "lib/ki_lib.py": "def m(x):\n    return x - 1\n",
    # A package neither beside the flow nor on its python_path: on PYTHONPATH (sys.path).
    "proj/ki_extnode.py": "from ki_ext.score import val\n\n\ndef fn(x):\n    return x + val()\n",
    "ext/ki_ext/__init__.py": "",
    "ext/ki_ext/score.py": "def val():\n    return 4\n",
    "app.py": (
        "import json\n\n\nclass App:\n    def __init__(self, style):\n"
        "        self.style = style\n\n"
        "    tail = json.load(open('tail.json'))\n\n"
        "    def __call__(self, question, suffix='!'):\n"
        "        return f'{self.style} {question}{suffix}{self.tail}'\n\n\n"
        "app = App(json.load(open('style.json')))\n"
    ),
    "style.json": '"plain"\n',
    "tail.json": '""\n',
}
CONNECTION = (
    "default_connection: local\nconnections:\n"
    "  local: {{type: openai, base_url: {url}, {limits}}}\n"
)
LIMITS = "timeout: 60, max_retries: 6, concurrency: 16"
FLOW_NODES = frozenset({"p", "lazy", "path", "ext", "l", "e", "s.q"})
TARGET_NODES = frozenset({"target"})


@dataclass(frozen=True)
class Case:
    """One change between two runs, and the nodes it must rerun (none: a non-ingredient)."""

    name: str
    reruns: frozenset[str]
    edit: Callable[[Path], None] = lambda _: None
    options: dict[str, Any] = field(default_factory=dict)
    target: bool = False


def _replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        text = (root / path).read_text("utf-8")
        assert old in text, (path, old)
        (root / path).write_text(text.replace(old, new), "utf-8")

    return edit


ROW = {"x": 5, "text": "tea"}
QUESTION = {"question": "Q?", "ground_truth": "plain Q?!"}


def _rows(file: str, row: dict[str, Any]) -> Callable[[Path], None]:
    return lambda root: write_jsonl(root / file, [row]) and None


def _file(file: str, text: str) -> Callable[[Path], None]:
    return lambda root: write(root / file, text) and None


def _nodes(*names: str) -> frozenset[str]:
    return frozenset(names)


FLOW_CASES = [
    Case("function code", _nodes("p"), _replace("proj/ki_code.py", "x * h()", "h() * x")),
    Case("imported helper", _nodes("p"), _replace("proj/ki_helper.py", "d()\n", "d() + 0\n")),
    Case("helper's helper", _nodes("p"), _replace("proj/ki_deep.py", "2", "7")),
    Case("function-local import", _nodes("lazy"), _replace("proj/ki_lazymod.py", "3", "4")),
    Case("python_path module", _nodes("path"), _replace("lib/ki_lib.py", "- 1", "- 2")),
    Case("package outside the project", _nodes("ext"), _replace("ext/ki_ext/score.py", "4", "5")),
    Case(
        "row input",
        _nodes("p", "lazy", "path", "ext", "s.q"),
        _rows("data.jsonl", {**ROW, "x": 6}),
    ),
    Case("literal input", _nodes("p"), _replace("proj/flow.yaml", "scale: 1", "scale: 2")),
    # The same code under another name: which function is called is an ingredient of its own.
    Case("function named", _nodes("p"), _replace("proj/flow.yaml", "ki_code:fn,", "ki_code:fn2,")),
    Case("prompt text", _nodes("l"), _replace("proj/ask.jinja2", "something", "anything")),
    Case("llm model", _nodes("l"), options={"model": "other-model"}),
    Case("llm params", _nodes("l"), _replace("proj/flow.yaml", "temperature: 0", "temperature: 1")),
    Case("llm and embedding text", _nodes("l", "e"), _rows("data.jsonl", {**ROW, "text": "tee"})),
    Case("embedding model", _nodes("e"), options={"embedding_model": "other-embedding"}),
    Case("sub-flow content", _nodes("s.q"), _replace("proj/sub.yaml", "add: 1", "add: 2")),
    Case("sub-flow code", _nodes("s.q"), _replace("proj/ki_sub.py", "x + add", "add + x")),
    Case("timeout", _nodes(), options={"timeout": 5.0}),
    Case("concurrency", _nodes(), options={"concurrency": 2}),
    Case(
        "retries and the connection's limits",
        _nodes(),
        _replace("flowkit.yaml", LIMITS, "timeout: 9, max_retries: 1, concurrency: 3, rpm: 999"),
    ),
]
TARGET_CASES = [
    Case("target code", _nodes("target"), _replace("app.py", "{suffix}", "{suffix} "), target=True),
    Case("target state", _nodes("target"), _file("style.json", '"fancy"\n'), target=True),
    Case("target class attribute", _nodes("target"), _file("tail.json", '"."\n'), target=True),
    Case("target default", _nodes("target"), _replace("app.py", "='!'", "='?'"), target=True),
    Case(
        "target input",
        _nodes("target"),
        _rows("q.jsonl", {**QUESTION, "question": "R?"}),
        target=True,
    ),
    Case("target timeout", _nodes(), options={"timeout": 5.0}, target=True),
    Case("target concurrency", _nodes(), options={"concurrency": 1}, target=True),
]


def _project(root: Path, url: str) -> None:
    for name, text in FILES.items():
        write(root / name, text)
    write(root / "flowkit.yaml", CONNECTION.format(url=url, limits=LIMITS))
    write_jsonl(root / "data.jsonl", [ROW])
    write_jsonl(root / "q.jsonl", [QUESTION])


def _reran(root: Path, name: str, target: bool, options: dict[str, Any]) -> set[str]:
    """The nodes of the run that did not come from the cache."""
    if target:
        flow, data, extra = "f1_score", "q.jsonl", {"target": "app.py:app"}
    else:
        flow, data, extra = str(root / "proj" / "flow.yaml"), "data.jsonl", {}
    result = flowkit.run(
        flow,
        root / data,
        cache_dir=root / "cache",
        output=root / "runs" / name,
        trace="full",
        **extra,
        **options,
    )
    traces = read_jsonl(result.run_dir / "traces.jsonl")
    assert result.counts["failed"] == 0, traces
    # A flow node is the sum of its own nodes (traced as `flow.node`), never a cache entry.
    ran = [t for t in traces if t["status"] == "ok" and t["kind"] != "flow"]
    return {t["node"] for t in ran if not t.get("cache_hit")}


@pytest.mark.parametrize("case", FLOW_CASES + TARGET_CASES, ids=lambda c: c.name)
def test_a_change_reruns_exactly_the_nodes_whose_key_holds_it(
    case: Case, llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(workdir, llm_server.base_url)
    monkeypatch.syspath_prepend(str(workdir / "ext"))
    watched = TARGET_NODES if case.target else FLOW_NODES
    assert _reran(workdir, "first", case.target, {}) >= watched
    assert _reran(workdir, "same", case.target, {}) == set()  # nothing changed: all hit
    case.edit(workdir)
    reran = _reran(workdir, "changed", case.target, case.options)
    if case.reruns:
        assert reran & watched == case.reruns
    else:
        assert reran == set()  # not an ingredient: not even a node downstream reruns


@pytest.fixture(autouse=True)
def _forget_ki_ext() -> Any:
    """The package outside the project stays loaded after its folder left sys.path: each case
    has its own."""
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "ki_ext"]:
        del sys.modules[name]
