"""The note on a slow inline python node names it as the user wrote it, and only the user's:
flowkit's own nodes (the built-in flows', --target's) are no node a `blocking: true` reaches."""

from __future__ import annotations

from pathlib import Path

import flowkit
from flowkit.engine.bound import BoundFlow, add_timings, slow_notices, timings
from flowkit.engine.context import RunContext, RunOptions
from flowkit.engine.prepare import bind
from flowkit.flow.builtin import builtin_flows
from flowkit.flow.target import with_target
from tests.support import read_json, read_jsonl, write, write_jsonl

TOOL = """
import time

def shout(text):
    time.sleep(0.02)
    return text.upper()

def pair(text):
    return {"question": text, "answer": text}
"""
APP = """
name: myapp
inputs: {question: {type: string}}
outputs: {answer: "${loud.output}"}
nodes:
  - {name: loud, type: python, function: tool:shout, inputs: {text: "${inputs.question}"}}
"""
SUITE = """
name: mine
inputs: {text: {type: string}}
outputs: {score: "${f1.output.score}"}
nodes:
  - {name: make, type: python, function: tool:pair, inputs: {text: "${inputs.text}"}}
  - name: f1
    type: flow
    flow: f1_score
    inputs: {answer: "${make.output.answer}", ground_truth: "${make.output.question}"}
"""


def _slow_everywhere(bound: BoundFlow) -> list[str]:
    """The notes of a run in which every inline call of every node took a second."""
    every = {node.qual: (1, 1.0) for node in bound.walk()}
    add_timings(bound, every)
    assert set(timings(bound)) == set(every)
    return slow_notices(bound)


def test_a_built_in_flows_nodes_are_never_noted() -> None:
    flow = flowkit.load_flow(builtin_flows()["agent_metrics"])
    assert _slow_everywhere(bind(flow, RunContext(RunOptions()))) == []


def test_the_users_nodes_are_noted_by_their_names_and_the_built_in_ones_not(
    workdir: Path,
) -> None:
    write(workdir / "tool.py", TOOL)
    write(workdir / "mine.yaml", SUITE)
    notes = _slow_everywhere(bind(flowkit.load_flow("mine.yaml"), RunContext(RunOptions())))
    assert [n.partition(":")[0] for n in notes] == ["node 'make'"]


def test_an_app_flow_targets_node_is_named_in_the_app_flow(workdir: Path) -> None:
    write(workdir / "tool.py", TOOL)
    write(workdir / "app.yaml", APP)
    flow = with_target(
        flowkit.load_flow(builtin_flows()["f1_score"]), "app.yaml", ["question", "ground_truth"]
    )
    notes = _slow_everywhere(bind(flow, RunContext(RunOptions())))
    assert [n.partition(":")[0] for n in notes] == ["node 'loud' of app flow 'myapp' (app.yaml)"]


def test_a_run_notes_the_slow_node_of_its_app_flow(workdir: Path) -> None:
    write(workdir / "tool.py", TOOL)
    write(workdir / "app.yaml", APP)
    data = write_jsonl(workdir / "q.jsonl", [{"question": "paris", "ground_truth": "PARIS"}])
    flowkit.run("f1_score", data, target="app.yaml", output=workdir / "r")
    assert read_jsonl(workdir / "r" / "outputs.jsonl")[0]["outputs"]["score"] == 1.0
    (note,) = [n for n in read_json(workdir / "r" / "run.json")["notices"] if "inline" in n]
    assert note.startswith("node 'loud' of app flow 'myapp' (app.yaml): its function took ")
