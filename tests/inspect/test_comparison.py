"""`flowkit.compare` and `RunResult.compare`: two runs compared from Python, as tables."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pandas as pd
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
    a = _run(tmp_path, "a", [3, 4, 5, 6] * 2)
    b = _run(tmp_path, "b", [2, 3, 4, 6] * 2)
    cmp = flowkit.compare(a, b)
    frame = cmp.to_pandas()
    assert list(frame.columns) == [
        "source", "rows", "A", "B", "difference", "ci_low", "ci_high", "verdict", "interval"
    ]  # fmt: skip
    score = frame.loc["y.score"]
    assert (score["source"], score["rows"], score["A"], score["B"]) == (
        "per-row output",
        8,
        4.5,
        3.75,
    )
    assert score["difference"] == pytest.approx(-0.75)
    assert score["ci_low"] <= score["difference"] <= score["ci_high"] <= 0
    assert score["verdict"] == "worse"
    assert score["interval"] == "paired bootstrap"
    mean = frame.loc["t.mean"]
    assert (mean["source"], mean["A"], mean["B"]) == ("metrics.json", 4.5, 3.75)
    assert mean["rows"] == 8  # the paired rows behind its interval, as y.score's
    # t.mean is y.score's mean, every row paired: the same interval, and its verdict.
    assert (mean["ci_low"], mean["ci_high"], mean["verdict"]) == (
        score["ci_low"],
        score["ci_high"],
        "worse",
    )
    assert mean["interval"] == "paired bootstrap of the per-row output y.score, whose mean it is"
    changes = cmp.changes()
    assert list(changes["line"]) == [0, 1, 2, 4, 5, 6]
    assert list(changes["regression"]) == [True] * 6
    assert "<b>b</b> compared with <b>a</b>: 8 paired rows" in cmp._repr_html_()
    assert repr(cmp) == "<RunComparison a → b; 8 paired rows; y.score: worse>"
    # Here the inputs themselves differ (x is the data), so the comparison says so.
    assert cmp.notes[0].startswith("warning: 6 of 8 paired rows have different inputs")


def test_too_few_rows_give_no_verdict_however_alike_their_changes(tmp_path: Path) -> None:
    """Five rows that all fell by one: a sign test puts that within chance at 95% (2 / 2**5 =
    0.0625), yet their bootstrap interval is [-1, -1]; it was called "worse"."""
    a = _run(tmp_path, "a", [3, 4, 5, 6, 7])
    b = _run(tmp_path, "b", [2, 3, 4, 5, 6])
    frame = flowkit.compare(a, b).to_pandas()
    score = frame.loc["y.score"]
    assert (score["rows"], score["difference"], score["verdict"]) == (5, -1.0, "too few rows")
    assert pd.isna(score["ci_low"]) and pd.isna(score["ci_high"])
    assert score["interval"] == "none: fewer than 6 paired rows with a value on both sides"
    assert frame.loc["t.mean", "verdict"] == "none: no interval"
    # At 90% five rows are enough (2 / 2**5 < 0.1): the floor follows the confidence.
    loose = flowkit.compare(a, b, confidence=0.9).to_pandas()
    assert loose.loc["y.score", "verdict"] == "worse"


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


def test_a_mean_of_rows_not_all_paired_gets_an_unpaired_interval(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [3, 4, 5, 6, 3, 4])
    b = _run(tmp_path, "b", [1, 1, 2, 2, 1, 2, 1, 2])  # two rows only B has
    frame = flowkit.compare(a, b).to_pandas()
    mean = frame.loc["t.mean"]
    assert mean["difference"] == pytest.approx(1.5 - 25 / 6)
    assert mean["ci_low"] <= mean["difference"] <= mean["ci_high"] < 0
    assert mean["verdict"] == "worse"
    assert mean["interval"] == (
        "bootstrap of each run's y.score values apart (the metric is their mean; not every row "
        "is paired)"
    )
    # Wider than the paired interval over the rows both runs have.
    score = frame.loc["y.score"]
    assert mean["ci_high"] - mean["ci_low"] > score["ci_high"] - score["ci_low"]


STORED = """
import statistics

def f(x):
    return {"score": x}

def agg(ys):
    doubled = [2 * y["score"] for y in ys]
    return {
        "mean": statistics.mean(doubled),
        "stdev": statistics.stdev(doubled),
        "count": len(doubled),
        "total": sum(doubled),
        "other.mean": 1.5 * statistics.mean(doubled),
    }
"""


def test_a_mean_with_a_stored_stdev_and_count_or_none_and_why(tmp_path: Path) -> None:
    flow = python_flow(tmp_path, STORED, "agg")
    runs = []
    for name, xs in (("a", [3, 4, 5, 6, 7, 8]), ("b", [1, 2, 2, 3, 4, 5])):
        data = write_jsonl(tmp_path / f"{name}.jsonl", [{"x": x} for x in xs])
        runs.append(flowkit.run(flow, data, name=name, runs_root=tmp_path / "runs"))
    frame = flowkit.compare(*runs).to_pandas()
    mean = frame.loc["t.mean"]
    a, b = ([2 * x for x in xs] for xs in ([3, 4, 5, 6, 7, 8], [1, 2, 2, 3, 4, 5]))
    half = NormalDist().inv_cdf(0.975) * math.sqrt(
        statistics.variance(a) / len(a) + statistics.variance(b) / len(b)
    )
    difference = statistics.mean(b) - statistics.mean(a)
    assert mean["ci_low"] == pytest.approx(difference - half)
    assert mean["ci_high"] == pytest.approx(difference + half)
    # The interval lies below zero: worse, as a per-row mean's would be; better lower, better.
    assert difference + half < 0
    assert mean["verdict"] == "worse"
    lower = flowkit.compare(*runs, lower_is_better=["t.mean"]).to_pandas()
    assert lower.loc["t.mean", "verdict"] == "better"
    assert mean["interval"] == (
        "normal, from each run's t.stdev and t.count (runs taken as independent)"
    )
    total, other = frame.loc["t.total"], frame.loc["t.other.mean"]
    assert pd.isna(total["ci_low"]) and pd.isna(other["ci_low"])
    assert (total["verdict"], other["verdict"]) == ("none: no interval", "none: no interval")
    assert total["interval"] == (
        "none: a count or a sum follows how many rows each run had; compare a mean or a rate"
    )
    assert other["interval"] == (
        "none: no per-row output has this mean in both runs, and metrics.json stores no "
        "t.other.stdev and t.other.count for it"
    )


def test_a_lower_is_better_metric_of_metrics_json_turns_its_verdict(tmp_path: Path) -> None:
    """`--lower-is-better t.mean` (a metric, not a per-row output) was refused from Python and
    dropped by `compare`, whose table then called the rise that --fail-if failed "better"."""
    a = _run(tmp_path, "a", [3, 4, 5, 6, 3, 4])
    b = _run(tmp_path, "b", [4, 5, 6, 7, 4, 5])
    frame = flowkit.compare(a, b, lower_is_better=["t.mean"]).to_pandas()
    assert frame.loc["y.score", "verdict"] == "better"  # not named: higher is better
    assert frame.loc["t.mean", "verdict"] == "worse"
    with pytest.raises(UsageError, match=r"--lower-is-better 't\.meen'"):
        flowkit.compare(a, b, lower_is_better=["t.meen"])


def test_runs_without_per_row_outputs_repr_without_an_empty_list(tmp_path: Path) -> None:
    """Runs kept as metrics.json alone read `<RunComparison a → b; 0 paired rows; >`."""
    a = _run(tmp_path, "a", [3, 4, 5, 6])
    b = _run(tmp_path, "b", [4, 5, 6, 7])
    for run in (a, b):
        (run.run_dir / "outputs.jsonl").unlink()
    cmp = flowkit.compare(a, b)
    assert repr(cmp) == "<RunComparison a → b; 0 paired rows>"
    assert cmp.to_pandas().loc["t.mean", "difference"] == 1.0
