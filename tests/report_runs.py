"""Runs for the report tests, made by really running a small judged flow through `flowkit.run`
against the local test server: an llm judge whose replies the data dictates (`[[reply: …]]`),
the shared score parser, a sub-flow whose python node fails on one row, and an aggregate. The
rows cover a pass, a fail, an invalid reply, a failed node, a bad input row, a long text and
text that is HTML (which the page must show as text)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import write, write_jsonl

NODES = """
def check(answer, x):
    if x == 2:
        raise ValueError("x=2 is not allowed here")
    return {"length": len(answer), "words": len(answer.split())}
"""
CHECK = """
name: check
inputs: {answer: {type: string}, x: {type: integer}}
outputs: {length: ${measure.output.length}}
nodes:
  - {name: measure, type: python, source: nodes.py, function: check,
     inputs: {answer: ${inputs.answer}, x: ${inputs.x}}}
"""
FLOW = """
name: judged
inputs: {question: {type: string}, answer: {type: string}, x: {type: integer}}
outputs:
  score: ${parse.output.score}
  result: ${parse.output.result}
  length: ${check.output.length}
nodes:
  - name: judge
    type: llm
    messages:
      - {role: system, content: "Rate the answer from 1 to 5; end with Score: N."}
      - {role: user, content: "Question: {{ question }}\\nAnswer: {{ answer }}"}
    inputs: {question: ${inputs.question}, answer: ${inputs.answer}}
  - name: parse
    type: python
    function: flowkit.metrics.scores:parse_score
    inputs: {text: ${judge.output}, min: 1, max: 5, threshold: 3}
  - {name: check, type: flow, flow: check.yaml, inputs: {answer: ${inputs.answer}, x: ${inputs.x}}}
  - name: summary
    type: aggregate
    function: flowkit.metrics.aggregate:score_summary
    inputs: {scores: ${parse.output.score}, threshold: 3}
"""
HTML = "<img src=x onerror=\"document.title='pwned'\"></script><!-- <b>bold</b>"
LONG = "spiders " * 400  # 3,200 characters: folded in the page


def rows(variant: str) -> list[dict[str, Any]]:
    """Eight rows; ``b`` changes some replies and lengthens every answer by the same amount."""
    replies = {"a": [5, 4, 3, None, 2, 1, 3, 2], "b": [3, 5, 3, None, 4, 1, 4, 3]}[variant]
    pad = " (checked)" if variant == "b" else ""
    texts = ["Paris.", LONG, "Shakespeare.", "Blue.", HTML, "Six.", "Carbon dioxide.", "Saturn."]
    out: list[dict[str, Any]] = []
    for i, (reply, text) in enumerate(zip(replies, texts, strict=True)):
        judged = "I would rather not say." if reply is None else f"Score: {reply}"
        row: dict[str, Any] = {
            "id": f"q{i}",
            "question": f"Question number {i}?",
            "answer": f"{text}{pad} [[reply: {judged}]]",
            "x": i,
        }
        if i == 5:
            del row["x"]  # a required input with no value: the row is bad input
        out.append(row)
    return out


@contextmanager
def pointed_at(server: LocalServer) -> Iterator[None]:
    """The environment that points flowkit's llm nodes at the test server, undone after."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWKIT_MODEL")}
    os.environ.update(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-local-test",
        FLOWKIT_MODEL="flowkit-test",
    )
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_runs(root: Path, server: LocalServer) -> dict[str, Path]:
    """Runs ``a`` and ``b`` of the judged flow under ``root/runs``."""
    write(root / "nodes.py", NODES)
    write(root / "check.yaml", CHECK)
    flow = write(root / "judged.yaml", FLOW)
    out = {}
    with pointed_at(server):
        for variant in ("a", "b"):
            data = write_jsonl(root / f"{variant}.jsonl", rows(variant))
            result = flowkit.run(
                flow, data, cache_dir=root / "cache", runs_root=root / "runs", name=variant
            )
            out[variant] = result.run_dir
    return out
