"""A small, seeded run of benchmarks/judge_coverage.py: with a judge wrong on a known share of
rows (more on long answers) and 10% of rows labelled, the corrected intervals cover the truth,
the judge-only ones do not, and the corrected interval is narrower than the labels-only one."""

from __future__ import annotations

from benchmarks.judge_coverage import simulate


def test_corrected_intervals_cover_the_truth_and_judge_only_ones_do_not() -> None:
    result = simulate(repetitions=80, rows=600, labelled=0.1, seed=1)
    assert 0.15 < result.wrong_share < 0.35
    for kind in ("mean", "pass_rate"):
        assert result.covered[kind]["corrected"] >= 0.9, kind
        assert result.covered[kind]["judge"] <= 0.5, kind
        assert result.width[kind]["corrected"] < result.width[kind]["labels"], kind
