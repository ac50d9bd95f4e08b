"""`flowkit.compare` and `RunResult.compare`: two runs compared from Python, as tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.errors import UsageError
from tests.support import python_flow, write_jsonl

MODULE = """
def f(x):
    return {"score": x}

def agg(ys):
    return {"mean": sum(y["score"] for y in ys) / len(ys)}
"""


def _run(tmp_path: Path, name: str, xs: list[int]) -> Any:
    flow = python_flow(tmp_path, MODULE, "agg")
    data = write_jsonl(tmp_path / f"{name}.jsonl", [{"x": x} for x in xs])
    return flowkit.run(flow, data, name=name, runs_root=tmp_path / "runs", use_cache=False)


def test_compare_gives_a_table_per_metric_and_the_changed_rows(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [3, 4, 5, 6])
    b = _run(tmp_path, "b", [2, 3, 4, 6])
    cmp = flowkit.compare(a, b)
    frame = cmp.to_pandas()
    assert list(frame.columns) == [
        "source", "rows", "A", "B", "difference", "ci_low", "ci_high", "verdict"
    ]  # fmt: skip
    score = frame.loc["y.score"]
    assert (score["source"], score["rows"], score["A"], score["B"]) == (
        "per-row output",
        4,
        4.5,
        3.75,
    )
    assert score["difference"] == pytest.approx(-0.75)
    assert score["ci_low"] <= score["difference"] <= score["ci_high"] <= 0
    assert score["verdict"] == "worse"
    mean = frame.loc["t.mean"]
    assert (mean["source"], mean["A"], mean["B"]) == ("metrics.json", 4.5, 3.75)
    changes = cmp.changes()
    assert list(changes["line"]) == [0, 1, 2]
    assert list(changes["regression"]) == [True, True, True]
    assert "<b>b</b> compared with <b>a</b>: 4 paired rows" in cmp._repr_html_()
    assert repr(cmp) == "<RunComparison a → b; 4 paired rows; y.score: worse>"
    # Here the inputs themselves differ (x is the data), so the comparison says so.
    assert cmp.notes[0].startswith("warning: 3 of 4 paired rows have different inputs")


def test_runs_by_name_or_folder_and_result_compare_agree(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [3, 4, 5, 6])
    b = _run(tmp_path, "b", [3, 4, 5, 7])
    by_name = flowkit.compare("a", "b", runs_root=tmp_path / "runs").to_pandas()
    by_folder = flowkit.compare(a.run_dir, str(b.run_dir)).to_pandas()
    by_method = a.compare(b).to_pandas()
    assert by_name.equals(by_folder) and by_name.equals(by_method)
    assert by_name.loc["y.score", "difference"] == 0.25


def test_compare_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        flowkit.compare(1, 2)
    assert str(info.value) == "compare takes a run's name, its folder or a RunResult, not int"
