"""The report's readers: histogram bins, flattening outputs into columns, which rows keep their
trace, and the table within its caps. Over run folders written by really running a flow."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import flowkit
from flowkit.inspect.report_data import (
    Limits,
    Rows,
    histogram,
    leaves,
    read_rows,
    table_data,
    trace_lines,
)
from tests.support import write, write_jsonl

NODES = """
def judge(v):
    if v % 7 == 3:
        raise ValueError("sevens")
    return {"score": v % 5, "label": None, "nested": {"f": v / 10}}
"""
FLOW = """
name: mod
inputs: {v: {type: integer}}
outputs: {score: ${j.output.score}, label: ${j.output.label}, detail: ${j.output.nested}}
nodes:
  - {name: j, type: python, source: nodes.py, function: judge, inputs: {v: ${inputs.v}}}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report-data")
    write(root / "nodes.py", NODES)
    flow = write(root / "mod.yaml", FLOW)
    data = write_jsonl(root / "d.jsonl", [{"v": i} for i in range(40)])
    return flowkit.run(flow, data, cache_dir=root / "cache", runs_root=root / "runs").run_dir


def test_integer_scores_get_a_bin_each() -> None:
    values = [1.0, 2.0, 2.0, 5.0]
    h = histogram("s", values)
    assert [b["label"] for b in h["bins"]] == ["1", "2", "3", "4", "5"]
    assert [b["count"] for b in h["bins"]] == [1, 2, 0, 0, 1]
    assert h["n"] == 4 and h["mean"] == 2.5 and (h["min"], h["max"]) == (1.0, 5.0)


def test_fractions_get_tenths_and_wide_ranges_equal_widths() -> None:
    rng = random.Random(3)
    unit = [rng.random() for _ in range(500)] + [1.0]
    h = histogram("f1", unit)
    assert len(h["bins"]) == 10 and h["bins"][0]["lo"] == 0 and h["bins"][-1]["hi"] == 1
    assert sum(b["count"] for b in h["bins"]) == len(unit)
    assert h["bins"][-1]["closed"] and not h["bins"][0]["closed"]  # 1.0 falls in the last bin
    for b in h["bins"]:
        inside = [v for v in unit if b["lo"] <= v < b["hi"] or (b["closed"] and v == b["hi"])]
        assert len(inside) == b["count"]
    wide = [rng.uniform(-50, 250) for _ in range(300)]
    w = histogram("len", wide, max_bins=12)
    assert len(w["bins"]) == 12 and sum(b["count"] for b in w["bins"]) == len(wide)
    assert w["bins"][0]["lo"] == min(wide) and w["bins"][-1]["hi"] == max(wide)
    flat = histogram("same", [0.25, 0.25])
    assert sum(b["count"] for b in flat["bins"]) == 2


def test_outputs_flatten_like_compare_names_them() -> None:
    assert dict(leaves({"a": 1, "s": {"x": {"y": 2}, "z": None}, "e": {}})) == {
        "a": 1,
        "s.x.y": 2,
        "s.z": None,
        "e": {},
    }
    assert dict(leaves("plain text")) == {"output": "plain text"}
    assert dict(leaves(None)) == {}


def test_the_table_leaves_out_empty_columns(run_dir: Path) -> None:
    rows = read_rows(run_dir, Limits())
    table = table_data(rows)
    assert [c["id"] for c in table["columns"]] == ["o.score", "o.detail.f", "i.v"]
    assert rows.total == 40 == len(table["rows"])
    failed = [r["line"] for r in table["rows"] if r["status"] == "failed"]
    assert failed == [v for v in range(40) if v % 7 == 3] == rows.failed
    assert rows.numbers["score"] == [float(v % 5) for v in range(40) if v % 7 != 3]


def test_past_max_rows_only_failed_rows_are_kept(run_dir: Path) -> None:
    rows = read_rows(run_dir, Limits(max_rows=10))
    kept = [e["line"] for e in rows.kept]
    assert kept == list(range(10)) + [v for v in range(10, 40) if v % 7 == 3]
    assert rows.total == 40 and len(rows.numbers["score"]) == 40 - len(rows.failed)
    # The extra failed rows are capped too, at max_rows more.
    few = read_rows(run_dir, Limits(max_rows=2))
    assert [e["line"] for e in few.kept] == [0, 1, 3, 10]


def test_traces_go_to_failed_then_changed_then_invalid_then_the_rest() -> None:
    rows = Rows(failed=[7, 3], invalid=[5], order=list(range(10)))
    rows.by_line = {line: {} for line in range(10) if line != 3}  # row 3 is not in the table
    assert trace_lines(rows, [9, 7], 4) == [7, 9, 5, 0]
    assert trace_lines(rows, [], 2) == [7, 5]
    assert trace_lines(rows, [], 100) == [7, 5, 0, 1, 2, 4, 6, 8, 9]
