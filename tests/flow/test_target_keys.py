"""`--target`'s key holds what the app is (an object's class code and state, not its repr), an
`async def __call__` is awaited, and an app's own defaults are kept (never replaced by None)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flowkit
from tests.support import REPO, read_jsonl, write, write_jsonl

APP_OBJECT = """
import json


class App:
    def __init__(self, settings):
        self.settings = settings

    def __call__(self, question):
        return f"{self.settings['style']} {question}"

    def __repr__(self):  # the same for every instance: it must not be the key
        return "App()"


app = App(json.load(open("settings.json")))
"""


def _target_runs(data: Path, target: str, name: str) -> list[tuple[Any, bool]]:
    """Each row's (app output, whether it came from the cache)."""
    result = flowkit.run(
        "f1_score", data, target=target, cache_dir="cache", output=name, use_cache=True
    )
    traces = read_jsonl(result.run_dir / "traces.jsonl")
    return [
        (t.get("output", {}).get("answer"), t.get("cache_hit", False))
        for t in sorted(traces, key=lambda t: t["line"])
        if t["node"] == "target"
    ]


@pytest.fixture
def data(workdir: Path) -> Path:
    return write_jsonl(workdir / "q.jsonl", [{"question": "Q?", "ground_truth": "plain Q?"}])


def test_an_object_target_is_keyed_by_its_class_code_and_its_state(
    workdir: Path, data: Path
) -> None:
    write(workdir / "app.py", APP_OBJECT)
    write(workdir / "settings.json", '{"style": "plain"}')
    assert _target_runs(data, "app.py:app", "a") == [("plain Q?", False)]
    assert _target_runs(data, "app.py:app", "b") == [("plain Q?", True)]
    write(workdir / "settings.json", '{"style": "fancy"}')  # state only: the code is the same
    assert _target_runs(data, "app.py:app", "c") == [("fancy Q?", False)]
    write(workdir / "app.py", APP_OBJECT.replace('f"{self', 'f"~{self'))
    assert _target_runs(data, "app.py:app", "d") == [("~fancy Q?", False)]


def test_an_object_whose_state_cannot_be_fingerprinted_runs_uncached_with_a_notice(
    workdir: Path, data: Path
) -> None:
    write(
        workdir / "app.py",
        "class App:\n    def __init__(self):\n        self.client = object()\n\n"
        "    def __call__(self, question):\n        return 'plain ' + question\n\n\napp = App()\n",
    )
    first = flowkit.run("f1_score", data, target="app.py:app", cache_dir="cache", output="a")
    assert _target_runs(data, "app.py:app", "b") == [("plain Q?", False)]
    notices = first.info["notices"]
    assert len(notices) == 1
    assert notices == [
        "--target 'app.py:app': the state of App (attribute 'client') cannot be fingerprinted "
        "(a value of type object is not JSON), so its answers are not cached (give it plain "
        "data to hold, in its attributes, closure and globals, to cache them)"
    ]


def test_an_async_call_method_is_awaited(workdir: Path, data: Path) -> None:
    write(
        workdir / "app.py",
        "import asyncio\n\n\nclass App:\n    async def __call__(self, question):\n"
        "        await asyncio.sleep(0)\n        return 'plain ' + question\n\n\napp = App()\n",
    )
    result = flowkit.run("f1_score", data, target="app.py:app", cache_dir="cache", output="a")
    assert result.counts["failed"] == 0
    assert _target_runs(data, "app.py:app", "b") == [("plain Q?", True)]


def test_a_callable_targets_defaults_are_kept(workdir: Path) -> None:
    write(
        workdir / "app.py",
        "def answer(question, top_k=3, style=None):\n    return f'{top_k} {style} {question}'\n",
    )
    rows = [
        {"question": "Q?", "ground_truth": "x"},
        {"question": "R?", "ground_truth": "x", "top_k": 5},
    ]
    data = write_jsonl(workdir / "q.jsonl", rows)
    assert _target_runs(data, "app.py:answer", "a") == [("3 None Q?", False), ("5 None R?", False)]


def test_an_app_flows_input_defaults_are_kept(workdir: Path) -> None:
    write(workdir / "app.py", "def answer(question, top_k):\n    return f'{top_k} {question}'\n")
    write(
        workdir / "app.yaml",
        """
        name: app
        inputs: {question: {type: string}, top_k: {type: integer, default: 3}}
        outputs: {answer: "${a.output}"}
        nodes:
          - {name: a, type: python, source: app.py, function: answer,
             inputs: {question: "${inputs.question}", top_k: "${inputs.top_k}"}}
        """,
    )
    data = write_jsonl(workdir / "q.jsonl", [{"question": "Q?", "ground_truth": "x"}])
    result = flowkit.run("f1_score", data, target="app.yaml", cache_dir="cache", output="a")
    rows = read_jsonl(result.run_dir / "outputs.jsonl")
    assert rows[0]["outputs"]["app_answer"] == "3 Q?"


def _script(workdir: Path, text: str) -> str:
    """Run ``text`` as a script (its own ``__main__``) in ``workdir``; its stdout."""
    write(workdir / "script.py", text)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "script.py"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


SCRIPT_TARGET = """
import sys

import flowkit


def app(question):
    return "plain " + question


result = flowkit.run("f1_score", "q.jsonl", target="__main__:app", cache_dir="c", output="a")
print([row["outputs"]["app_answer"] for row in result.rows()], "__main__" in sys.modules)
"""


def test_a_scripts_own_function_is_a_target_and___main___stays_loaded(
    workdir: Path, data: Path
) -> None:
    assert _script(workdir, SCRIPT_TARGET) == "['plain Q?'] True\n"


NOTEBOOK = """
import json
import linecache
import sys

import flowkit

cells = 0


def cell(text):
    '''Run ``text`` as ipykernel runs a notebook cell: its source kept only in linecache.'''
    global cells
    cells += 1
    name = f"/tmp/ipykernel_0/{cells}.py"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    exec(compile(text, name, "exec"), sys.modules["__main__"].__dict__)


def run(name):
    result = flowkit.run("f1_score", "q.jsonl", target="__main__:app", cache_dir="c", output=name)
    lines = (result.run_dir / "traces.jsonl").read_text().splitlines()
    traces = [t for t in map(json.loads, lines) if t["node"] == "target"]
    print(name, [row["outputs"]["app_answer"] for row in result.rows()],
          [t.get("cache_hit", False) for t in traces], result.info["notices"])


cell("STYLE = 'plain'\\ndef helper(q):\\n    return STYLE + ' ' + q\\n")
cell("def app(question):\\n    return helper(question)\\n")
run("first")
run("same")
cell("def helper(q):\\n    return STYLE + ' ~' + q\\n")
run("helper")
cell("STYLE = 'fancy'\\n")
run("data")
cell("client = object()\\ndef app(question):\\n    return helper(question) if client else ''\\n")
run("object")
"""


def test_a_notebook_target_is_keyed_by_the_cells_it_reaches(workdir: Path, data: Path) -> None:
    lines = _script(workdir, NOTEBOOK).splitlines()
    cached = "1 row's app reply came from the cache; its latency is the original call's"
    uncached = (
        "--target '__main__:app': global 'client' of app cannot be fingerprinted (a value of "
        "type object is not JSON), so its answers are not cached (give it plain data to hold, "
        "in its attributes, closure and globals, to cache them)"
    )
    assert lines == [
        "first ['plain Q?'] [False] []",
        f"same ['plain Q?'] [True] [{cached!r}]",  # the cached reply says so
        "helper ['plain ~Q?'] [False] []",
        "data ['fancy ~Q?'] [False] []",
        f"object ['fancy ~Q?'] [False] [{uncached!r}]",
    ]


STATE_APPS = """
import json

K = json.load(open("k.json"))


def make(k):
    def app(question):
        return f"{k} {question}"

    return app


closure = make(K)


class Base:
    k = K


class WithClassAttribute(Base):
    def __call__(self, question):
        return f"{self.k} {question}"


with_class_attribute = WithClassAttribute()
"""


@pytest.mark.parametrize("app", ["closure", "with_class_attribute"])
def test_a_closures_cells_and_a_class_attribute_are_the_targets_state(
    workdir: Path, data: Path, app: str
) -> None:
    write(workdir / "apps.py", STATE_APPS)
    write(workdir / "k.json", '"plain"')
    assert _target_runs(data, f"apps.py:{app}", "a") == [("plain Q?", False)]
    assert _target_runs(data, f"apps.py:{app}", "b") == [("plain Q?", True)]
    write(workdir / "k.json", '"fancy"')  # the same code, another value set at import
    assert _target_runs(data, f"apps.py:{app}", "c") == [("fancy Q?", False)]


STATEFUL_SCRIPT = """
import functools
import json

from pydantic import BaseModel, PrivateAttr

import flowkit


class Svc:
    def __init__(self, k):
        self.k = k

    def ask(self, question, scale=1):
        return f"{self.k * scale} {question}"


def make(fn):
    def app(question):
        return fn(question)

    return app


svc = Svc(1)
partial_app = functools.partial(svc.ask, scale=1)
closure_app = make(svc.ask)
ask = svc.ask


def global_app(question):
    return ask(question)


def lambda_app(question):
    return svc.ask(question)


class Model(BaseModel):
    k: int = 1
    _secret: int = PrivateAttr(default=1)

    def __call__(self, question):
        return f"{self.k}{self._secret} {question}"


class Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 1

    def __call__(self, question):
        return f"{self.k} {question}"


class Cached:
    k = 1

    @functools.cached_property
    def value(self):
        return Cached.k

    def __call__(self, question):
        return f"{self.value} {question}"


model, slotted, cached = Model(), Slotted(), Cached()


def run(app):
    result = flowkit.run("f1_score", "q.jsonl", target=f"__main__:{app}", cache_dir="c")
    lines = (result.run_dir / "traces.jsonl").read_text().splitlines()
    traces = [t for t in map(json.loads, lines) if t["node"] == "target"]
    notices = [n for n in result.info["notices"] if n.startswith("--target")]
    answers = [row["outputs"]["app_answer"] for row in result.rows()]
    return answers + [t.get("cache_hit", False) for t in traces] + notices


def change_svc():
    svc.k += 4


def change_model():
    model._secret += 1


def change_slotted():
    slotted.k += 1


def change_cached():
    Cached.k += 1
    cached.__dict__.pop("value", None)  # computed only when the app ran


for app, change in [
    ("partial_app", change_svc),
    ("closure_app", change_svc),
    ("global_app", change_svc),
    ("lambda_app", change_svc),
    ("model", change_model),
    ("slotted", change_slotted),
    ("cached", change_cached),
]:
    first = run(app)
    change()
    print(app, first, run(app))
"""


@pytest.mark.slow
def test_a_targets_bound_methods_and_objects_anywhere_are_keyed_by_their_state(
    workdir: Path, data: Path
) -> None:
    """`svc.ask` reached through a partial, a closure or a global, an object a function uses,
    a pydantic model, a `__slots__` class and a cached property, all in `__main__`: each is
    cached (no notice), keyed by the state it answers from, the same in another process."""
    first = _script(workdir, STATEFUL_SCRIPT).splitlines()
    expected = {
        "partial_app": ("1 Q?", "5 Q?"),
        "closure_app": ("5 Q?", "9 Q?"),
        "global_app": ("9 Q?", "13 Q?"),
        "lambda_app": ("13 Q?", "17 Q?"),
        "model": ("11 Q?", "12 Q?"),
        "slotted": ("1 Q?", "2 Q?"),
        "cached": ("1 Q?", "2 Q?"),
    }
    assert first == [
        f"{app} [{before!r}, False] [{after!r}, False]" for app, (before, after) in expected.items()
    ]
    again = _script(workdir, STATEFUL_SCRIPT).splitlines()  # another process, the same state
    assert again == [
        f"{app} [{before!r}, True] [{after!r}, True]" for app, (before, after) in expected.items()
    ]


class _Client:
    def __init__(self) -> None:
        self.conn = object()

    def ask(self, question: str) -> str:
        return question


def test_a_bound_method_whose_object_cannot_be_fingerprinted_makes_the_app_uncacheable() -> None:
    from flowkit.code.fingerprint import app_fingerprint

    client = _Client()
    why = (
        "the state of _Client (attribute 'conn') cannot be fingerprinted (a value of type "
        "object is not JSON)"
    )
    assert app_fingerprint(functools.partial(client.ask)) == (None, why)
    assert app_fingerprint(lambda question: client.ask(question)) == (None, why)


def test_an_object_whose_module_was_unloaded_is_still_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flowkit evicts edited user modules between runs; an object made before keeps its class,
    whose module is then gone from sys.modules: it is still the user's code, fingerprinted by
    its state, not refused as a library's object."""
    import sys

    from flowkit.code.fingerprint import app_fingerprint

    client = _Client()
    # Another test in this process may have evicted it already (worksteal order varies).
    monkeypatch.delitem(sys.modules, _Client.__module__, raising=False)
    why = (
        "the state of _Client (attribute 'conn') cannot be fingerprinted (a value of type "
        "object is not JSON)"
    )
    assert app_fingerprint(lambda question: client.ask(question)) == (None, why)
