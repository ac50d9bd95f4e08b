"""A flow of two chained llm nodes (an answer, then a judge of it) and its data."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write, write_jsonl

CHAINED = """
name: chained
inputs: {q: {type: string}}
outputs: {answer: "${answer.output}", verdict: "${judge.output}"}
nodes:
  - name: answer
    type: llm
    messages: [{role: user, content: "Answer briefly: {{ q }}"}]
    inputs: {q: "${inputs.q}"}
  - name: judge
    type: llm
    messages: [{role: user, content: "Is this a good answer to {{ q }}? {{ a }}"}]
    inputs: {q: "${inputs.q}", a: "${answer.output}"}
"""


@pytest.fixture
def chained(tmp_path: Path) -> Path:
    return write(tmp_path / "chained.yaml", CHAINED)


def questions(tmp_path: Path, n: int) -> Path:
    return write_jsonl(tmp_path / f"q{n}.jsonl", [{"q": f"question {i}"} for i in range(n)])
