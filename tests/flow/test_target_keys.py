"""`--target`'s key holds what the app is (an object's class code and state, not its repr), an
`async def __call__` is awaited, and an app's own defaults are kept (never replaced by None)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from tests.support import read_jsonl, write, write_jsonl

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
