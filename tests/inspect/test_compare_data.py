"""`compare` warns that two runs may not be over the same data only when what the rows *are*
differs (the inputs read as data, the data file, the pairing key), never because the app's
answers, context or conversation differ: that is what an A/B of two app versions changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from tests.support import write, write_jsonl

FLOW = """name: app_ab
inputs:
  question: {type: string, default: ""}
  answer: {type: string, default: ""}
  context: {type: any, default: ""}
  response: {type: string, default: ""}
  retrieved_context: {type: any, default: ""}
  messages: {type: any, default: null}
  threshold: {type: number, default: 3}
outputs: {score: ${n.output}}
nodes:
  - name: n
    type: python
    source: m.py
    function: f
    inputs: {question: ${inputs.question}, answer: ${inputs.answer}, response: ${inputs.response}}
"""
MODULE = """
def f(question, answer, response):
    return len(question + answer + response) % 7
"""


def _notes(
    tmp_path: Path, rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], **kw: Any
) -> list[str]:
    flow = write(tmp_path / "app_ab.yaml", FLOW)
    write(tmp_path / "m.py", MODULE)
    runs = []
    for name, rows in (("a", rows_a), ("b", rows_b)):
        data = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        runs.append(
            flowkit.run(flow, data, name=name, runs_root=tmp_path / "runs", use_cache=False)
        )
    return flowkit.compare(runs[0], runs[1], **kw).notes


def _rows(version: str, **columns: Any) -> list[dict[str, Any]]:
    """Four rows; each column's value is the given text with the row's number (and the app's
    version, for the app's own columns)."""
    return [
        {k: f"{v}{version if v.startswith('app') else ''} {i}" for k, v in columns.items()}
        for i in range(4)
    ]


@pytest.mark.parametrize(
    "columns",
    [
        {"answer": "app answer", "context": "app context"},  # the data has no other input
        {"response": "app response", "retrieved_context": "app docs"},
        {"messages": "app conversation"},
        {"question": "same question", "answer": "app answer", "context": "app context"},
    ],
    ids=["answer-context", "response-retrieved", "messages", "with-a-question"],
)
def test_an_ab_of_two_app_versions_is_not_other_data(
    tmp_path: Path, columns: dict[str, str]
) -> None:
    a, b = _rows("1", **columns), _rows("2", **columns)
    for row in (*a, *b):
        row["threshold"] = 3  # one value everywhere: tells rows apart no more than the app
    assert _notes(tmp_path, a, b) == []


def test_other_data_is_told_by_the_inputs_that_are_data(tmp_path: Path) -> None:
    a = _rows("1", question="question", answer="app answer", context="app context")
    b = _rows("2", question="question", answer="app answer", context="app context")
    b = [{**row, "question": f"another {row['question']}"} for row in b]
    assert _notes(tmp_path, a, b) == [
        "warning: 4 of 4 paired rows have different inputs (first: line 0); the runs may not "
        "be over the same data — pair them with --key INPUT (an input of the flow that names "
        "each row)"
    ]


def test_runs_that_read_one_data_file_are_over_the_same_data(tmp_path: Path) -> None:
    flow = write(tmp_path / "app_ab.yaml", FLOW)
    write(tmp_path / "m.py", MODULE)
    rows = [{"q1": f"question {i}", "q2": f"reworded {i}"} for i in range(4)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    runs = [
        flowkit.run(
            flow,
            data,
            mapping={"question": f"${{data.{column}}}"},
            name=column,
            runs_root=tmp_path / "runs",
            use_cache=False,
        )
        for column in ("q1", "q2")
    ]
    assert flowkit.compare(*runs).notes == []
