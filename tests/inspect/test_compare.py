"""`flowkit compare`: paired per-row deltas with bootstrap intervals, over runs made by really
running a small python flow. The effects are built in: B = A + 1 on every row, or B = A plus
noise whose mean is exactly zero."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.flow.compose import compose
from flowkit.inspect.compare import BETTER, SAME, TOO_FEW, WORSE, bootstrap_ci, compare_runs
from tests.support import write, write_jsonl

NODES = """
def judge(v):
    return {"score": v, "label": "high" if v > 2 else "low", "ok": v > 2}
"""
FLOW = """
name: sc
inputs: {v: {type: number}, id: {type: string, default: ""}}
outputs: {score: ${j.output.score}, label: ${j.output.label}, ok: ${j.output.ok}}
nodes:
  - {name: j, type: python, source: nodes.py, function: judge, inputs: {v: ${inputs.v}}}
  - {name: m, type: aggregate, function: flowkit.metrics.aggregate:mean,
     inputs: {values: ${j.output.score}}}
"""
N = 200


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    write(tmp_path / "nodes.py", NODES)
    return write(tmp_path / "sc.yaml", FLOW)


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    """x: a base score; y = x + noise, the noise ±1 in equal numbers (mean exactly 0)."""
    rng = random.Random(7)
    noise = [1] * (N // 2) + [-1] * (N // 2)
    rng.shuffle(noise)
    return [
        {"id": f"q{i}", "x": rng.randint(1, 5), "y": 0, "z": 0, "noise": noise[i]} for i in range(N)
    ]


def make_run(
    tmp_path: Path, flow: Any, rows: list[dict[str, Any]], name: str, v: str | None
) -> Path:
    data = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    result = flowkit.run(
        flow,
        data,
        mapping={"v": v} if v else None,
        cache_dir=tmp_path / "cache",
        runs_root=tmp_path / "runs",
        name=name,
    )
    return result.run_dir


@pytest.fixture
def runs(tmp_path: Path, flow: Path, rows: list[dict[str, Any]]) -> dict[str, Path]:
    for r in rows:
        r["plus1"] = r["x"] + 1
        r["noisy"] = r["x"] + r["noise"]
    return {
        "a": make_run(tmp_path, flow, rows, "a", "${data.x}"),
        "plus1": make_run(tmp_path, flow, rows, "plus1", "${data.plus1}"),
        "noisy": make_run(tmp_path, flow, rows, "noisy", "${data.noisy}"),
    }


def test_a_known_effect_is_found(runs: dict[str, Path]) -> None:
    cmp = compare_runs(runs["a"], runs["plus1"], metrics=["score"])
    (m,) = cmp.metrics
    assert (m.name, m.n, m.delta, m.ci_low, m.ci_high) == ("score", N, 1.0, 1.0, 1.0)
    assert m.verdict == BETTER
    assert cmp.paired == N and cmp.only_a == cmp.only_b == []
    # When lower is better, the same change is a regression, and rows list as regressions.
    low = compare_runs(runs["a"], runs["plus1"], metrics=["score"], lower_is_better=["score"])
    assert low.metrics[0].verdict == WORSE
    assert len(low.changes) == 10 and all(c.regression and c.delta == 1 for c in low.changes)
    # metrics.json side by side, without intervals.
    agg = {a.name: a for a in cmp.aggregates}
    assert agg["sc.mean"].delta == pytest.approx(1.0)
    assert agg["sc.count"].delta == 0


def test_zero_mean_noise_is_no_significant_change(runs: dict[str, Path]) -> None:
    cmp = compare_runs(runs["a"], runs["noisy"], resamples=1000, seed=3)
    by_name = {m.name: m for m in cmp.metrics}
    assert set(by_name) == {"score", "ok"}  # numbers and booleans; the text label is not compared
    m = by_name["score"]
    assert m.delta == 0.0
    assert m.ci_low is not None and m.ci_high is not None
    assert m.ci_low < 0 < m.ci_high
    assert 0.05 < m.ci_high < 0.3  # about 1.96 * 1 / sqrt(200) ≈ 0.14
    assert m.verdict == SAME
    # Changed rows: regressions first, the largest first, at most 10 per output.
    score_changes = [c for c in cmp.changes if c.metric == "score"]
    assert len(score_changes) == 10
    assert all(c.regression and c.delta == -1 for c in score_changes)
    # The same seed gives the same interval; another seed a slightly different one.
    again = compare_runs(runs["a"], runs["noisy"], resamples=1000, seed=3)
    assert (again.metrics[1].ci_low, again.metrics[1].ci_high) == (m.ci_low, m.ci_high)
    other = compare_runs(runs["a"], runs["noisy"], resamples=1000, seed=4).metrics[1]
    assert (other.ci_low, other.ci_high) != (m.ci_low, m.ci_high)
    assert other.ci_low == pytest.approx(m.ci_low, abs=0.05)


def test_pairing_by_key_with_rows_missing_on_each_side(
    tmp_path: Path, flow: Path, rows: list[dict[str, Any]], runs: dict[str, Path]
) -> None:
    shuffled = [dict(r) for r in rows if r["id"] != "q5"]
    random.Random(1).shuffle(shuffled)
    shuffled.append({"id": "new", "x": 3, "plus1": 9})
    b = make_run(tmp_path, flow, shuffled, "b", "${data.plus1}")
    by_key = compare_runs(runs["a"], b, key="id", metrics=["score"])
    assert by_key.paired == N - 1
    assert by_key.only_a == ["q5"] and by_key.only_b == ["new"]
    (m,) = by_key.metrics
    assert (m.delta, m.ci_low, m.ci_high, m.verdict) == (1.0, 1.0, 1.0, BETTER)
    assert by_key.changes[0].key.startswith("q") and by_key.changes[0].line_a != -1
    # By line the same runs pair unrelated rows: no clean +1.
    by_line = compare_runs(runs["a"], b, metrics=["score"])
    assert by_line.paired == N and by_line.metrics[0].delta != 1.0
    with pytest.raises(UsageError, match="did you mean 'id'"):
        compare_runs(runs["a"], b, key="idd")


def test_suite_outputs_flatten_and_unknown_names_are_errors(tmp_path: Path) -> None:
    write(tmp_path / "nodes.py", "def f(x, k):\n    return x * k\n")
    for name, k in (("alpha", 1), ("beta", 2)):
        write(
            tmp_path / f"{name}.yaml",
            f"""
            name: {name}
            inputs: {{x: {{type: number}}}}
            outputs: {{score: ${{n.output}}}}
            nodes:
              - {{name: n, type: python, source: nodes.py, function: f,
                 inputs: {{x: ${{inputs.x}}, k: {k}}}}}
            """,
        )
    suite = compose([tmp_path / "alpha.yaml", tmp_path / "beta.yaml"])
    base = [{"x": i % 4} for i in range(20)]
    a = make_run(tmp_path, suite, base, "sa", None)
    b = make_run(tmp_path, suite, [{"x": r["x"] + 0.5} for r in base], "sb", None)
    cmp = compare_runs(a, b)
    assert {m.name: m.delta for m in cmp.metrics} == {"alpha.score": 0.5, "beta.score": 1.0}
    with pytest.raises(UsageError, match=r"did you mean 'beta\.score'"):
        compare_runs(a, b, metrics=["beta.scor"])
    with pytest.raises(UsageError, match="--lower-is-better"):
        compare_runs(a, b, lower_is_better=["gamma.score"])


def test_missing_values_and_too_few_rows(tmp_path: Path, flow: Path) -> None:
    a = make_run(tmp_path, flow, [{"x": 1}, {"x": 2}, {"x": 3}], "a", "${data.x}")
    b = make_run(tmp_path, flow, [{"x": 2}, {"x": "oops"}], "b", "${data.x}")  # row 1: bad input
    cmp = compare_runs(a, b, metrics=["score"])
    assert cmp.only_a == [2]
    (m,) = cmp.metrics
    assert (m.n, m.missing, m.delta, m.verdict) == (1, 1, 1.0, TOO_FEW)


def test_cli_rich_and_json(runs: dict[str, Path]) -> None:
    cli = CliRunner()
    out = cli.invoke(main, ["compare", str(runs["a"]), str(runs["plus1"]), "--resamples", "200"])
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert "per-row outputs (paired bootstrap, 200 resamples, seed 0)" in text
    score = next(line for line in text.splitlines() if line.split()[:1] == ["score"])
    assert score.split()[-1] == "better" and "[+1, +1]" in score
    assert "rows that changed most" in text and "sc.mean" in text
    js = cli.invoke(
        main,
        [
            "compare",
            str(runs["a"]),
            str(runs["noisy"]),
            "--json",
            "--metric",
            "score",
            "--seed",
            "5",
        ],
    )
    data = json.loads(js.stdout)
    assert data["seed"] == 5 and data["paired"] == N
    assert [m["verdict"] for m in data["metrics"]] == ["no significant change"]
    bad = cli.invoke(main, ["compare", str(runs["a"]), str(runs["noisy"]), "--metric", "scor"])
    assert bad.exit_code == 2 and "did you mean 'score'" in bad.stderr


def test_the_bootstrap_interval_of_many_rows_is_narrow_around_the_mean() -> None:
    # How fast it is belongs to benchmarks, not to a test on a shared machine.
    rng = random.Random(0)
    diffs = [rng.choice((-1.0, 0.0, 0.0, 1.0, 2.0)) for _ in range(10_000)]
    low, high = bootstrap_ci(diffs, resamples=200, seed=0)
    mean = sum(diffs) / len(diffs)
    assert low < mean < high and high - low < 0.05
