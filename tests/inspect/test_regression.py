"""Regression gates against a baseline: `run --baseline RUN --gate-drop`, `compare --fail-if`,
the markdown summary and JUnit XML a CI job reads."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.inspect.regression import DropGate, parse_drop
from tests.support import python_flow, write_jsonl

MEAN = """
def f(x):
    return x

def mean(ys):
    return {"mean": sum(ys) / len(ys), "top": max(ys)}
"""


@pytest.fixture
def runs(workdir: Path) -> Path:
    """Flow t (y = x, metrics t.mean and t.top) run once as the baseline `base`."""
    python_flow(workdir, MEAN, "mean")
    write_jsonl(workdir / "base.jsonl", [{"x": x} for x in (4, 5, 4, 5, 4, 5, 4, 5)])
    assert _cli("run", "t.yaml", "--data", "base.jsonl", "-n", "base", "-q").exit_code == 0
    return workdir


def _cli(*args: str, env: dict[str, str | None] | None = None) -> Result:
    # A CI machine's own step summary is not where these tests write.
    return CliRunner().invoke(main, list(args), env={"GITHUB_STEP_SUMMARY": None, **(env or {})})


def _run_against_base(
    workdir: Path, xs: list[int], *extra: str, env: dict[str, str | None] | None = None
) -> Result:
    write_jsonl(workdir / "new.jsonl", [{"x": x} for x in xs])
    args = ("run", "t.yaml", "--data", "new.jsonl", "-n", "new", "-q", "--baseline", "base")
    return _cli(*args, *extra, env=env)


def test_a_drop_beyond_the_margin_fails_naming_the_metric_change_and_interval(
    runs: Path,
) -> None:
    result = _run_against_base(runs, [3, 4, 3, 4, 3, 4, 3, 4], "--gate-drop", "t.mean>0.5")
    assert result.exit_code == 1, result.output
    assert (
        "error: gate-drop t.mean>0.5: failed, dropped by 1, more than 0.5 (t.mean 4.5 → 3.5); "
        "95% CI of the change [-1, -1] over 8 paired rows (from per-row 'y')"
    ) in result.output


def test_a_drop_within_the_margin_passes(runs: Path) -> None:
    result = _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 4], "--gate-drop", "t.mean>0.5")
    assert result.exit_code == 0, result.output
    assert "gate-drop t.mean>0.5: passed (t.mean 4.5 → 4.375); 95% CI" in result.output


def test_a_percent_margin_is_of_the_baseline_value(runs: Path) -> None:
    # 4.5 → 4.125 is a drop of 0.375, 8.3% of 4.5: over 5%, within 10%.
    xs = [4, 5, 4, 5, 4, 4, 4, 3]
    assert _run_against_base(runs, xs, "--gate-drop", "t.mean>10%").exit_code == 0
    result = _run_against_base(runs, xs, "--overwrite", "--gate-drop", "t.mean>5%")
    assert result.exit_code == 1
    assert "gate-drop t.mean>5%: failed, dropped by 0.375, more than 0.225" in result.output


def test_a_gate_without_margin_fails_when_the_interval_says_it_dropped(runs: Path) -> None:
    # Every row one lower: the interval is [-1, -1], wholly below zero.
    result = _run_against_base(runs, [3, 4, 3, 4, 3, 4, 3, 4], "--gate-drop", "y")
    assert result.exit_code == 1
    assert (
        "error: gate-drop y: failed, dropped by 1 (y 4.5 → 3.5); 95% CI of the change "
        "[-1, -1] over 8 paired rows"
    ) in result.output
    # One row lower, one higher: the interval straddles zero.
    result = _run_against_base(runs, [3, 5, 4, 5, 4, 5, 5, 5], "--overwrite", "--gate-drop", "y")
    assert result.exit_code == 0, result.output
    assert "gate-drop y: passed (y 4.5 → 4.5)" in result.output


def test_lower_is_better_makes_a_rise_the_regression(runs: Path) -> None:
    result = _run_against_base(
        runs, [5, 6, 5, 6, 5, 6, 5, 6], "--gate-drop", "t.top>0.5", "--lower-is-better", "t.top"
    )
    assert result.exit_code == 1
    assert "gate-drop t.top>0.5: failed, rose by 1, more than 0.5 (t.top 5 → 6)" in result.output


def test_compare_takes_a_lower_is_better_metric_of_metrics_json(runs: Path) -> None:
    """A defect rate lives in metrics.json only: `compare --lower-is-better` refused it (exit 2)
    while `run --lower-is-better` took it."""
    assert _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 7]).exit_code == 0  # t.top 5 → 7
    fail_if = ("--fail-if", "t.top>1", "--lower-is-better", "t.top")
    result = _cli("compare", "base", "new", *fail_if)
    assert result.exit_code == 1, result.output
    assert "fail-if t.top>1: failed" in result.output
    assert _cli("compare", "new", "base", *fail_if).exit_code == 0  # 7 → 5 is better


def test_a_misspelt_lower_is_better_is_refused_before_any_row(runs: Path) -> None:
    """It was ignored: the gate then watched the other direction, and a rise passed."""
    args = ("--gate-drop", "t.top>1", "--lower-is-better", "t.tpo")
    result = _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 7], *args)
    assert result.exit_code == 2, result.output
    assert "--lower-is-better 't.tpo': baseline base has no numeric metric" in result.output
    assert "(did you mean 't.top'?)" in result.output
    assert not (runs / "runs" / "new").exists()


def test_a_misspelt_drop_gate_is_refused_before_any_row(runs: Path) -> None:
    result = _run_against_base(runs, [4] * 8, "--gate-drop", "t.meen>0.1")
    assert result.exit_code == 2
    assert result.output.splitlines()[0] == (
        "error: --gate-drop t.meen>0.1: baseline base has no numeric metric or per-row output "
        "'t.meen' (did you mean 't.mean'?)"
    )
    assert not (runs / "runs" / "new").exists()


def test_a_run_may_not_overwrite_its_own_baseline(runs: Path) -> None:
    """The gates would pair the new rows with themselves: a drop with an interval of [+0, +0]."""
    write_jsonl(runs / "new.jsonl", [{"x": 1}] * 8)
    for where in (("-n", "base"), ("--output", "runs/base")):
        args = ("run", "t.yaml", "--data", "new.jsonl", *where, "--overwrite", "-q")
        result = _cli(*args, "--baseline", "base", "--gate-drop", "t.mean>0.5")
        assert result.exit_code == 2, result.output
        assert "--baseline 'runs/base' is the run folder this run writes" in result.output
    assert "4.5" in (runs / "runs" / "base" / "metrics.json").read_text()  # still the baseline


def test_a_baseline_that_did_not_finish_is_refused_before_any_row(runs: Path) -> None:
    """A cancelled baseline job leaves metrics of some rows only: a gate on them decides
    nothing, in `run --baseline` as in `compare --fail-if`."""
    shutil.copytree(runs / "runs" / "base", runs / "runs" / "half")
    info = json.loads((runs / "runs" / "half" / "run.json").read_text("utf-8"))
    info["status"], info["counts"]["rows"] = "interrupted", 3
    (runs / "runs" / "half" / "run.json").write_text(json.dumps(info), "utf-8")
    write_jsonl(runs / "new.jsonl", [{"x": 4}])
    args = ("run", "t.yaml", "--data", "new.jsonl", "-n", "new", "-q", "--baseline", "half")
    result = _cli(*args, "--gate-drop", "t.mean>0.5")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        "error: --baseline: run half is interrupted after 3 rows, not completed: its metrics "
        "cover only the rows it finished\n  hint: finish it with `flowkit run --resume half`"
    )
    assert not (runs / "runs" / "new").exists()
    for pair in (("half", "base"), ("base", "half")):
        gated = _cli("compare", *pair, "--fail-if", "t.mean>0.5")
        assert gated.exit_code == 2, gated.output
        assert "error: --fail-if: run half is interrupted after 3 rows" in gated.stderr
    assert _cli("compare", "base", "half").exit_code == 0  # looking is not gating


@pytest.mark.parametrize("text", ['{"t.mean": 4.5, ', "[4.5]"])
def test_a_baseline_with_a_damaged_metrics_json_is_refused_before_any_row(
    runs: Path, text: str
) -> None:
    (runs / "runs" / "base" / "metrics.json").write_text(text, "utf-8")
    result = _run_against_base(runs, [4, 5], "--gate-drop", "t.mean>0.5")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: runs/base/metrics.json is damaged (")
    assert "hint: restore it from a copy, or run the flow again" in result.stderr
    assert not (runs / "runs" / "new").exists()
    assert _cli("compare", "base", "base").exit_code == 2
    listed = _cli("runs")  # the listing still shows it, without metrics
    assert listed.exit_code == 0, listed.output
    assert "base" in listed.stdout


def test_a_drop_gate_needs_a_baseline(runs: Path) -> None:
    result = _cli("run", "t.yaml", "--data", "base.jsonl", "--gate-drop", "t.mean>0.1")
    assert result.exit_code == 2
    assert result.output.splitlines()[0] == (
        "error: --gate-drop compares with a baseline: give --baseline RUN"
    )
    lower = _cli("run", "t.yaml", "--data", "base.jsonl", "--lower-is-better", "y")
    assert lower.exit_code == 2  # else it is silently nothing
    assert lower.output.splitlines()[0] == (
        "error: --lower-is-better turns the verdicts against a baseline: give --baseline RUN"
    )


def test_an_interval_gate_needs_a_mean_or_a_rate(runs: Path) -> None:
    result = _run_against_base(runs, [4] * 8, "--gate-drop", "t.top")
    assert result.exit_code == 2
    assert result.output.splitlines()[0] == (
        "error: --gate-drop t.top: 't.top' has no interval to judge it by: only a mean's or a "
        "rate's interval can be worked out from the runs' files, and this is neither (nor the "
        "mean of a per-row 0/1 output); give a margin ('t.top>0.1') or gate a per-row output"
    )


@pytest.mark.parametrize("text", ["t.mean>=0.1", "t.mean>x", "t.mean>-1", "t.mean>inf", ">1"])
def test_a_malformed_drop_gate_says_how_it_reads(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_drop(text)
    assert info.value.message == (
        f"--gate-drop {text!r} must read METRIC>MARGIN or METRIC, e.g. 'groundedness.mean>0.1'"
    )


def test_parse_drop() -> None:
    assert parse_drop(" g.mean > 0.1 ") == DropGate("g.mean", 0.1)
    assert parse_drop("g.mean>5%") == DropGate("g.mean", 5.0, relative=True)
    assert parse_drop("g.score") == DropGate("g.score", None)
    # The other names --gate reads are --gate-drop's too (docs/coming-from-databricks.md).
    former = parse_drop("agent.latency_seconds.mean>1")
    assert former == DropGate("agent/latency_seconds/average", 1.0)
    assert parse_drop("ada_similarity.mean").metric == "embedding_similarity.mean"


def test_compare_fail_if_writes_summary_and_junit(runs: Path) -> None:
    assert _run_against_base(runs, [3, 4, 3, 4, 3, 4, 3, 4]).exit_code == 0
    result = _cli(
        "compare", "base", "new",
        "--fail-if", "t.mean>0.5", "--fail-if", "t.top>2",
        "--summary", "md", "--summary-file", "summary.md", "--junit", "junit.xml",
    )  # fmt: skip
    assert result.exit_code == 1
    summary = (runs / "summary.md").read_text("utf-8").splitlines()
    assert summary[0] == "### flowkit compare base → new: ❌ 1 of 2 checks failed"
    assert "| fail-if t.top>2 | ✅ passed (t.top 5 → 4) |" in summary
    # Each metric with the interval and verdict of the comparison the gates read.
    assert "| metric | baseline | this run | change | interval | verdict |" in summary
    assert "| t.mean | 4.5 | 3.5 | -1 | [-1, -1] | worse |" in summary
    assert "| t.top | 5 | 4 | -1 | — | — |" in summary
    suite = ET.parse(runs / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.attrib["failures"] == "1"
    cases = {c.attrib["name"]: c.find("failure") for c in suite.iter("testcase")}
    assert list(cases) == ["fail-if t.mean>0.5", "fail-if t.top>2"]
    failure = cases["fail-if t.mean>0.5"]
    assert failure is not None and failure.attrib["message"].startswith(
        "fail-if t.mean>0.5: failed, dropped by 1, more than 0.5"
    )
    assert cases["fail-if t.top>2"] is None


def test_an_error_with_colours_and_control_characters_keeps_the_ci_files_readable(
    workdir: Path,
) -> None:
    """An exception's message may carry terminal colours and a NUL: one such character made
    the whole JUnit file unreadable; a `<` in the summary opened an HTML tag on GitHub's page."""
    module = (
        "def f(x):\n    return x\n\n"
        "def agg(ys):\n    raise RuntimeError('bad \\x1b[31mred\\x1b[0m <tag> \\x00 nul')\n"
    )
    python_flow(workdir, module, "agg")
    write_jsonl(workdir / "d.jsonl", [{"x": 1}])
    args = ("run", "t.yaml", "--data", "d.jsonl", "-q", "--junit", "j.xml")
    result = _cli(*args, "--summary-file", "s.md")
    assert result.exit_code == 1, result.output
    suite = ET.parse(workdir / "j.xml").getroot().find("testsuite")
    assert suite is not None
    failure = next(c for c in suite.iter("testcase") if c.attrib["name"] == "aggregate a")
    message = failure.find("failure")
    assert message is not None
    assert message.attrib["message"] == "aggregate 'a': RuntimeError: bad red <tag>  nul"
    summary = (workdir / "s.md").read_text("utf-8")
    assert "| aggregate a | ❌ aggregate 'a': RuntimeError: bad red &lt;tag>  nul |" in summary


@pytest.mark.parametrize("option", ["--junit", "--summary-file"])
def test_a_ci_file_that_cannot_be_written_is_refused_before_any_row(
    runs: Path, option: str
) -> None:
    """Found out after the run, it was an exit 2 (a usage error) after every (paid) row."""
    (runs / "taken").write_text("a file, not a folder", "utf-8")
    (runs / "folder").mkdir()
    for place, why in (("taken/x.xml", "cannot write 'taken/x.xml': "), ("folder", "a folder")):
        result = _run_against_base(runs, [4, 5], option, place)
        assert result.exit_code == 2, result.output
        assert why in result.stderr
        assert not (runs / "runs" / "new").exists()


def test_a_summary_against_a_baseline_has_verdicts_and_says_when_rows_are_not_the_same(
    runs: Path,
) -> None:
    """Without --gate-drop the summary had no interval or verdict; and a change of data order
    (rows paired by line that are other rows) was said by `compare` but not by `run`."""
    result = _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 5], "--summary-file", "s.md")
    assert result.exit_code == 0, result.output
    summary = (runs / "s.md").read_text("utf-8")
    assert "| t.mean | 4.5 | 4.5 | +0 | [+0, +0] | no significant change |" in summary
    assert "warning" not in result.stderr + summary
    # The baseline's rows in another order: every pair is of other data.
    other = _run_against_base(
        runs, [5, 4, 5, 4, 5, 4, 5, 4], "--overwrite", "--gate-drop", "t.mean>1",
        "--summary-file", "o.md",
    )  # fmt: skip
    assert other.exit_code == 0, other.output
    said = "warning: 8 of 8 paired rows have different inputs (first: line 0)"
    assert said in other.stderr
    assert f"> {said}" in (runs / "o.md").read_text("utf-8").splitlines()[2]


def test_an_aggregate_that_breaks_its_declaration_is_one_error(workdir: Path) -> None:
    """It was a warning atop the run (the run's notice) and the error after it: one cause."""
    module = (
        "from flowkit.metrics.keys import returns_keys\n\ndef f(x):\n    return x\n\n"
        "@returns_keys(['a'])\ndef agg(ys):\n    return {'b': 1.0}\n"
    )
    python_flow(workdir, module, "agg")
    write_jsonl(workdir / "d.jsonl", [{"x": 1}])
    result = _cli("run", "t.yaml", "--data", "d.jsonl", "-q")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("returned key 'b' that its @returns_keys does not declare") == 1
    assert result.stderr.startswith("error: aggregate 'a': UndeclaredMetricKeys: ")


def test_the_ci_files_go_into_folders_that_do_not_exist_yet(runs: Path) -> None:
    ci = ("--summary", "md", "--summary-file", "out/md/s.md", "--junit", "out/xml/junit.xml")
    result = _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 5], "--gate-drop", "t.mean>0.5", *ci)
    assert result.exit_code == 0, result.output
    assert (runs / "out" / "md" / "s.md").read_text("utf-8").startswith("### flowkit run new")
    assert ET.parse(runs / "out" / "xml" / "junit.xml").getroot().tag == "testsuites"
    result = _cli("compare", "base", "new", "--fail-if", "t.mean>0.5", "--junit", "out")
    assert result.exit_code == 2
    assert "error: cannot write 'out': Is a directory" in result.output


def test_a_summary_file_alone_asks_for_the_summary(runs: Path) -> None:
    """`--summary-file $GITHUB_STEP_SUMMARY` without `--summary md` wrote nothing, silently."""
    result = _run_against_base(runs, [4, 5, 4, 5, 4, 5, 4, 5], "--summary-file", "s.md")
    assert result.exit_code == 0, result.output
    assert (runs / "s.md").read_text("utf-8").startswith("### flowkit run new")
    assert _cli("compare", "base", "new", "--summary-file", "c.md").exit_code == 0
    assert (runs / "c.md").read_text("utf-8").startswith("### flowkit compare base → new")


def test_the_summary_is_appended_to_github_step_summary(runs: Path) -> None:
    page = runs / "step_summary.md"
    page.write_text("earlier step\n", encoding="utf-8")
    result = _run_against_base(
        runs, [4] * 8, "--gate-drop", "t.mean>1", "--summary", "md",
        env={"GITHUB_STEP_SUMMARY": str(page)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = page.read_text("utf-8").splitlines()
    assert lines[:2] == ["earlier step", "### flowkit run new (t) vs baseline base: ✅ passed"]
    assert "| metric | baseline | this run | change | interval | verdict |" in lines


def test_without_a_place_the_summary_goes_to_stdout(runs: Path) -> None:
    result = _cli("run", "t.yaml", "--data", "base.jsonl", "-q", "--summary", "md")
    assert result.exit_code == 0
    assert "| metric | value |\n|---|---:|\n| t.mean | 4.5 |\n| t.top | 5 |\n" in result.output
