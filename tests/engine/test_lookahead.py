"""Keying a batch of rows before they run (flowkit.engine.lookahead), and what it changes for a run:
its cache queries, never its results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.cache.store import Cache, node_key
from flowkit.engine.bound import BoundFlow
from flowkit.engine.context import RunContext, RunOptions
from flowkit.engine.lookahead import Feed, Lookahead
from flowkit.engine.prepare import bind
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flows
from tests.support import read_jsonl, write, write_jsonl


def _prepared(flow: Flow) -> BoundFlow:
    return bind(flow, RunContext(RunOptions()))


def _never(*_: Any) -> bool:
    return False


def test_the_first_nodes_are_keyed_also_inside_subflows(tmp_path: Path) -> None:
    flow = _prepared(load_flows(["f1_score", "exact_match"]))
    cache = Cache(tmp_path)
    ahead = Lookahead(flow, cache, _never)
    row = {"ground_truth": "a1", "threshold": 0.5, "normalize": False}
    rows = [(i, {**row, "answer": f"a{i}"}, None) for i in range(3)]
    ahead.fetch([*rows, (3, None, "a bad row")])
    inputs, key = ahead.take(1, "f1_score.f1") or ({}, "")
    f1 = flow.nodes["f1_score"].sub.nodes["f1"]  # type: ignore[union-attr]
    assert inputs == {"answer": "a1", "ground_truth": "a1", "threshold": 0.5}
    assert key == node_key(f1.static_key, inputs)
    assert ahead.take(3, "f1_score.f1") is None
    assert ahead.take(1, "f1_score.summary") is None  # aggregates run after the rows
    cache.close()


def test_refreshed_and_uncached_nodes_are_not_keyed_ahead(tmp_path: Path) -> None:
    flow = _prepared(flowkit.load_flow("f1_score"))
    cache = Cache(tmp_path)
    ahead = Lookahead(flow, cache, lambda node, qual: qual == "f1")
    ahead.fetch([(0, {"answer": "a", "ground_truth": "a", "threshold": 0.5}, None)])
    assert ahead.take(0, "f1") is None
    cache.close()


FLOW = """
    name: chain
    inputs: {x: {type: integer}, flag: {type: boolean, default: true}}
    outputs: {y: ${second.output}, z: ${third.output}}
    nodes:
      - {name: first, type: python, source: nodes.py, function: inc, inputs: {x: ${inputs.x}},
         when: ${inputs.flag}}
      - {name: second, type: python, source: nodes.py, function: inc, inputs: {x: ${first.output}}}
      - {name: third, type: python, source: nodes.py, function: inc, inputs: {x: ${inputs.x}}}
    """


def test_a_warm_rerun_gives_the_same_rows_from_the_cache(tmp_path: Path) -> None:
    """Skipped nodes, nodes downstream of a skipped one and in-run duplicates (the three
    nodes share one function, so equal inputs share a key) all come out as computed."""
    write(tmp_path / "nodes.py", "def inc(x):\n    return (x or 0) + 1\n")
    flow = write(tmp_path / "flow.yaml", FLOW)
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i, "flag": i % 3 != 0} for i in range(900)])
    cold = flowkit.run(flow, data, cache_dir=tmp_path / "c", output=tmp_path / "cold")
    warm = flowkit.run(flow, data, cache_dir=tmp_path / "c", output=tmp_path / "warm")
    assert warm.counts["node_runs"] == 0
    assert warm.counts["cache_hits"] == cold.counts["node_runs"] + cold.counts["cache_hits"]
    assert read_jsonl(warm.run_dir / "outputs.jsonl") == read_jsonl(cold.run_dir / "outputs.jsonl")


def test_rows_read_before_a_read_error_are_handed_out_before_it_is_raised() -> None:
    def rows() -> Any:
        for i in range(5):
            yield i, {"x": i}, None
        raise OSError("disk gone")

    fetched: list[list[int]] = []
    feed = Feed(rows(), 3, lambda batch: fetched.append([line for line, _, _ in batch]))
    feed.check()  # nothing failed yet
    lines = []
    while (row := feed.next()) is not None:
        lines.append(row[0])
    assert lines == [0, 1, 2, 3, 4]
    assert fetched == [[0, 1, 2], [3, 4]]  # each batch's cache entries fetched before its rows
    assert feed.next() is None  # dry, and stays so
    with pytest.raises(OSError, match="disk gone"):
        feed.check()


def test_the_first_batch_of_rows_is_the_first_wave() -> None:
    fetched: list[list[int]] = []
    rows = ((i, {"x": i}, None) for i in range(7))
    feed = Feed(rows, 3, lambda batch: fetched.append([line for line, _, _ in batch]), first=2)
    while feed.next() is not None:
        pass
    # The first wave's rows are read (and their cache entries fetched) before the rest.
    assert fetched == [[0, 1], [2, 3, 4], [5, 6]]
