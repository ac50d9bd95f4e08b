"""Rates of metrics.json in `compare`: a pass rate, a defect rate, an invalid rate, an accuracy,
each with the interval of its own rows (paired, apart, or from the stored counts) and a verdict
that `--fail-if` reads too."""

from __future__ import annotations

import random
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from statsmodels.stats.proportion import confint_proportions_2indep

import flowkit
from flowkit.cli.main import main
from tests.support import python_flow, write_jsonl

PASS = """
def f(x):
    if x == 0:  # an unreadable answer
        return {"score": None, "result": "invalid"}
    return {"score": x, "result": "pass" if x > 3 else "fail"}

def agg(ys):
    valid = [y for y in ys if y["score"] is not None]
    passed = sum(y["result"] == "pass" for y in valid)
    invalid = len(ys) - len(valid)
    return {
        "pass_rate": passed / len(valid),
        "invalid_rate": invalid / len(ys),
        "count": len(valid),
        "invalid": invalid,
    }
"""
A = [4, 5, 2, 4, 5, 1, 4, 5, 3, 4, 5, 4]
B = [2, 5, 2, 1, 3, 1, 4, 2, 3, 4, 2, 3]


def _runs(tmp_path: Path, module: str, xs_a: list[int], xs_b: list[int]) -> tuple[Any, Any]:
    flow = python_flow(tmp_path, module, "agg")
    runs = []
    for name, xs in (("a", xs_a), ("b", xs_b)):
        data = write_jsonl(tmp_path / f"{name}.jsonl", [{"x": x} for x in xs])
        runs.append(flowkit.run(flow, data, name=name, runs_root=tmp_path / "runs"))
    return runs[0], runs[1]


def _cli(tmp_path: Path, *args: str) -> Result:
    runs = ("--runs-dir", str(tmp_path / "runs"))
    return CliRunner().invoke(main, ["compare", "a", "b", *args, *runs], env={"COLUMNS": "200"})


def _bootstrap(diffs: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap of the mean difference, written again with numpy's quantile."""
    rng = random.Random(seed)
    means = [statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(resamples)]
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def _newcombe(hits_a: int, n_a: int, hits_b: int, n_b: int) -> tuple[float, float]:
    low, high = confint_proportions_2indep(
        hits_b, n_b, hits_a, n_a, method="newcomb", compare="diff"
    )
    return float(low), float(high)


def test_a_pass_rate_of_paired_rows_gets_the_paired_interval_of_its_rows(tmp_path: Path) -> None:
    runs = _runs(tmp_path, PASS, A, B)
    frame = flowkit.compare(*runs).to_pandas()
    rate = frame.loc["t.pass_rate"]
    diffs = [float(y > 3) - float(x > 3) for x, y in zip(A, B, strict=True)]
    low, high = _bootstrap(diffs)
    assert rate["difference"] == pytest.approx(statistics.fmean(diffs))
    assert (rate["ci_low"], rate["ci_high"]) == pytest.approx((low, high), abs=1e-12)
    assert high < 0 and rate["verdict"] == "worse"
    assert rate["interval"] == (
        "paired bootstrap of the per-row y.result == 'pass', the rows this rate counts"
    )
    # The CLI's gate reads the same verdict and prints the same interval.
    result = _cli(tmp_path, "--fail-if", "t.pass_rate")
    assert result.exit_code == 1, result.output
    assert (
        f"fail-if t.pass_rate: failed, dropped by {-statistics.fmean(diffs):.4g} (t.pass_rate "
        f"0.75 → 0.25); 95% CI of the change [{low:+.4g}, {high:+.4g}] over 12 paired rows (from "
        "per-row y.result == 'pass')"
    ) in result.output
    lower = ("--lower-is-better", "t.pass_rate")
    assert _cli(tmp_path, "--fail-if", "t.pass_rate", *lower).exit_code == 0


KEYED = """
def f(x):
    return {"result": "pass" if x % 10 > 3 else "fail"}

def agg(ys):
    return {"pass_rate": sum(y["result"] == "pass" for y in ys) / len(ys)}
"""


def test_a_rate_pairs_its_rows_by_the_key_compare_pairs_by(tmp_path: Path) -> None:
    """x's tens are the row's id, its units the score: run B holds the rows in another order."""
    xs_a = [10 * i + s for i, s in enumerate(A)]
    xs_b = [10 * i + s for i, s in enumerate(B)][::-1]
    flow = python_flow(tmp_path, KEYED, "agg")
    flow.write_text(flow.read_text().replace("inputs: {x:", "inputs: {id: {type: integer}, x:", 1))
    runs = []
    for name, xs in (("a", xs_a), ("b", xs_b)):
        data = write_jsonl(tmp_path / f"{name}.jsonl", [{"x": x, "id": x // 10} for x in xs])
        runs.append(flowkit.run(flow, data, name=name, runs_root=tmp_path / "runs"))
    rate = flowkit.compare(*runs, key="id").to_pandas().loc["t.pass_rate"]
    diffs = [float(y > 3) - float(x > 3) for x, y in zip(A, B, strict=True)]
    assert (rate["ci_low"], rate["ci_high"]) == pytest.approx(_bootstrap(diffs), abs=1e-12)
    by_line = flowkit.compare(*runs).to_pandas().loc["t.pass_rate"]
    assert (by_line["ci_low"], by_line["ci_high"]) != (rate["ci_low"], rate["ci_high"])


def test_a_rate_of_rows_not_all_paired_gets_newcombes_interval(tmp_path: Path) -> None:
    more = [*B, 5, 5, 4, 5]  # four rows only B has
    runs = _runs(tmp_path, PASS, A, more)
    rate = flowkit.compare(*runs).to_pandas().loc["t.pass_rate"]
    expected = _newcombe(sum(x > 3 for x in A), len(A), sum(x > 3 for x in more), len(more))
    assert (rate["ci_low"], rate["ci_high"]) == pytest.approx(expected, abs=1e-12)
    assert rate["verdict"] == ("worse" if expected[1] < 0 else "no significant change")
    assert rate["interval"] == (
        "Newcombe's interval of two independent proportions, from the per-row y.result == "
        "'pass' (not every row is paired)"
    )


def test_rates_from_the_stored_counts_alone(tmp_path: Path) -> None:
    """A run kept as metrics.json alone: a pass rate over t.count valid rows, an invalid rate
    over t.count + t.invalid rows; an invalid rate is better lower without being told."""
    xs_a, xs_b = [*A, 0], [*B, *[0] * 12]
    runs = _runs(tmp_path, PASS, xs_a, xs_b)
    for run in runs:
        (run.run_dir / "outputs.jsonl").unlink()
    frame = flowkit.compare(*runs).to_pandas()
    valid_a, valid_b = [x for x in xs_a if x], [x for x in xs_b if x]
    rate = frame.loc["t.pass_rate"]
    expected = _newcombe(
        sum(x > 3 for x in valid_a), len(valid_a), sum(x > 3 for x in valid_b), len(valid_b)
    )
    assert (rate["ci_low"], rate["ci_high"]) == pytest.approx(expected, abs=1e-12)
    assert rate["interval"] == (
        "Newcombe's interval of two independent proportions, from each run's t.count (runs "
        "taken as independent)"
    )
    invalid = frame.loc["t.invalid_rate"]
    expected = _newcombe(1, len(xs_a), 12, len(xs_b))
    assert (invalid["ci_low"], invalid["ci_high"]) == pytest.approx(expected, abs=1e-12)
    assert invalid["interval"] == (
        "Newcombe's interval of two independent proportions, from each run's t.count + "
        "t.invalid (runs taken as independent)"
    )
    assert expected[0] > 0 and invalid["verdict"] == "worse"  # more unreadable answers


SEVERITY = """
def f(x):
    return {"severity": x}

def agg(ys):
    scores = [y["severity"] for y in ys]
    return {
        "defect_rate": sum(s >= 2 for s in scores) / len(scores),
        "defect_rate@high": sum(s >= 3 for s in scores) / len(scores),
        "count": len(scores),
    }
"""


def test_a_defect_rate_is_a_cut_of_a_per_row_severity_and_better_lower(tmp_path: Path) -> None:
    sev_a = [0, 1, 0, 0, 2, 1, 0, 0, 1, 0, 0, 3]
    sev_b = [2, 3, 2, 0, 2, 3, 2, 1, 2, 0, 2, 3]
    runs = _runs(tmp_path, SEVERITY, sev_a, sev_b)
    frame = flowkit.compare(*runs).to_pandas()
    for metric, cut in (("t.defect_rate", 2), ("t.defect_rate@high", 3)):
        row = frame.loc[metric]
        diffs = [float(b >= cut) - float(a >= cut) for a, b in zip(sev_a, sev_b, strict=True)]
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(_bootstrap(diffs), abs=1e-12)
        assert row["interval"] == (
            f"paired bootstrap of the per-row y.severity >= {cut}, the rows this rate counts"
        )
    assert frame.loc["t.defect_rate", "ci_low"] > 0
    assert frame.loc["t.defect_rate", "verdict"] == "worse"  # more defects, no flag needed
    result = _cli(tmp_path, "--fail-if", "t.defect_rate")
    assert result.exit_code == 1, result.output
    assert "fail-if t.defect_rate: failed, rose by" in result.output


ACCURACY = """
def f(x):
    return {"correct": x == 1}

def agg(ys):
    return {"accuracy": sum(y["correct"] for y in ys) / len(ys)}
"""


def test_the_mean_of_a_per_row_boolean_under_any_name_is_a_rate(tmp_path: Path) -> None:
    xs_a, xs_b = [1, 1, 0, 1, 1, 0, 1, 1], [1, 0, 0, 1, 0, 0, 1, 0]
    runs = _runs(tmp_path, ACCURACY, xs_a, xs_b)
    row = flowkit.compare(*runs).to_pandas().loc["t.accuracy"]
    diffs = [float(b) - float(a) for a, b in zip(xs_a, xs_b, strict=True)]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(_bootstrap(diffs), abs=1e-12)
    assert row["interval"] == (
        "paired bootstrap of the per-row 0/1 output y.correct, the rows this rate counts"
    )


TWO_FLAGS = """
def f(x):
    return {"ok": x % 2, "flag": x // 2}

def agg(ys):
    return {"accuracy": sum(y["ok"] for y in ys) / len(ys)}
"""


def test_a_rate_two_0_1_outputs_share_gets_no_paired_interval_of_either(
    tmp_path: Path,
) -> None:
    """t.accuracy is y.ok's mean; y.flag has the same share in both runs over other rows. The
    paired interval of y.flag (the first by name) was [0, 0]: a certainty the rows of y.ok
    (ten of twenty changed) do not give. Which rows it counts is unknown: the shares apart."""
    # x: ok = x % 2, flag = x // 2. A: ok on rows 0-9, flag on 10-19; B: ok moved to rows 5-14.
    xs_a = [1] * 10 + [2] * 10
    xs_b = [0] * 5 + [1] * 5 + [3] * 5 + [2] * 5
    runs = _runs(tmp_path, TWO_FLAGS, xs_a, xs_b)
    row = flowkit.compare(*runs).to_pandas().loc["t.accuracy"]
    assert (row["A"], row["B"]) == (0.5, 0.5)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(_newcombe(10, 20, 10, 20))
    assert row["interval"].startswith("Newcombe's interval of two independent proportions: ")
    assert "0/1 output y.flag, 0/1 output y.ok" in row["interval"]
    assert row["verdict"] == "no significant change"


KINDS = """
def f(x):
    if x < 0:
        raise ValueError("a failed row")
    return {"score": x, "result": "pass" if x > 3 else "fail", "latency": 0.5 * x}

def agg(ys):
    ys = [y for y in ys if y is not None]
    if not ys:
        return {"mean": None, "pass_rate": None, "count": 0}
    scores = sorted(y["score"] for y in ys)
    out = {
        "mean": sum(scores) / len(scores),
        "pass_rate": sum(y["result"] == "pass" for y in ys) / len(ys),
        "count": len(ys),
        "tokens.sum": 10 * len(ys),
        "p50": scores[len(scores) // 2],
        "p90": scores[int(0.9 * (len(scores) - 1))],
        "agent/latency_seconds/average": sum(y["latency"] for y in ys) / len(ys),
        "big": max(scores) if max(scores) > 5 else None,
        "ratio": float("nan") if len(ys) >= 10 else 0.5,
        "label": "v1",
    }
    if len(ys) < 10:
        out["only_in_a"] = 1.0
    return out
"""
VERDICTS = {"better", "worse", "no significant change"}


def test_every_kind_of_metric_has_an_interval_or_a_reason_and_the_cli_agrees(
    tmp_path: Path,
) -> None:
    xs_a, xs_b = [4, 6, 2, 4, 5, 1, 4, 6, 3], [2, 5, 2, 1, 3, 1, 4, 2, 3, 4]
    runs = _runs(tmp_path, KINDS, xs_a, xs_b)
    frame = flowkit.compare(*runs).to_pandas()
    reasons = {
        "t.count": "none: a count or a sum follows how many rows each run had; compare a mean "
        "or a rate",
        "t.p50": "none: only a mean's or a rate's interval can be worked out from the runs' "
        "files, and this is neither (nor the mean of a per-row 0/1 output)",
        "t.big": "none: no value in run B (no row gave one)",
        "t.ratio": "none: no value in run B (no row gave one)",
        "t.label": "none: not a number in both runs",
        "t.only_in_a": "none: only run A has this metric",
    }
    assert dict(frame.loc[list(reasons), "interval"]) == reasons
    assert frame.loc["t.tokens.sum", "interval"] == reasons["t.count"]
    assert frame.loc["t.p90", "interval"] == reasons["t.p50"]
    assert frame.loc["agent/latency_seconds/average", "interval"] == (
        "bootstrap of each run's y.latency values apart (the metric is their mean; not every "
        "row is paired)"
    )
    for name, row in frame.iterrows():
        if row["interval"].startswith("none:"):
            assert row["verdict"] == "none: no interval", name
        else:
            assert row["verdict"] in VERDICTS, name
    # --fail-if METRIC alone fails exactly where the frame says "worse", with its interval.
    judged = [n for n in frame.index if not frame.loc[n, "interval"].startswith("none:")]
    args = [a for n in judged for a in ("--fail-if", str(n))]
    result = _cli(tmp_path, *args, "--junit", str(tmp_path / "junit.xml"))
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    failed = {c.attrib["name"]: c.find("failure") is not None for c in suite.iter("testcase")}
    assert failed == {f"fail-if {n}": frame.loc[n, "verdict"] == "worse" for n in judged}
    assert result.exit_code == (1 if any(failed.values()) else 0)
    # A metric without an interval is refused before judging, with the reason.
    result = _cli(tmp_path, "--fail-if", "t.p50")
    assert result.exit_code == 2
    assert f"'t.p50' has no interval to judge it by: {reasons['t.p50'][6:]}" in result.output


def test_a_run_whose_rows_all_failed_says_why_each_metric_has_no_verdict(tmp_path: Path) -> None:
    runs = _runs(tmp_path, KINDS, [4, 6, 2, 4, 5], [-1, -2, -3, -4, -5])
    cmp = flowkit.compare(*runs)
    frame = cmp.to_pandas()
    assert "no numeric per-row output is present in both runs" in cmp.notes
    assert frame.loc["t.mean", "interval"] == "none: no value in run B (no row gave one)"
    assert frame.loc["t.pass_rate", "interval"] == "none: no value in run B (no row gave one)"
    assert frame.loc["t.p50", "interval"] == "none: only run A has this metric"
    assert set(frame["verdict"]) == {"none: no interval"}
