"""`flowkit report`: the data the page is built from, how it is embedded, and the command.

The runs come from really running a judged flow (llm judge on the local test server, a sub-flow
that fails on one row, a bad input row, an invalid reply); see report_runs.py. What the page
does with the data in a browser is tested in test_report_browser.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.inspect.compare import compare_runs
from flowkit.inspect.report import Limits, build_report, embed_json, format_metric, render_html
from flowkit.inspect.report_data import CELL_CHARS
from flowkit.testing.server import LocalServer
from tests.report_runs import HTML, LONG, make_runs
from tests.support import read_json, read_jsonl

DATA_SCRIPT = re.compile(r'<script type="application/json" id="flowkit-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, _server: LocalServer) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("report"), _server)


@pytest.fixture(scope="module")
def report(runs: dict[str, Path]) -> dict[str, Any]:
    return build_report(runs["a"])


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def outputs(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}


def test_format_metric() -> None:
    assert format_metric("judged.pass_rate", 0.3333333) == "33.3%"
    assert format_metric("violence.defect_rate@high", 0.25) == "25.0%"
    assert format_metric("judged.invalid_rate", 0) == "0.0%"
    assert format_metric("judged.mean", 3.16666) == "3.167"
    assert format_metric("tokens.total.sum", 1234567) == "1,234,567"
    assert format_metric("judged.mean", None) == "—"
    assert format_metric("judged.mean", math.nan) == "nan"
    # "rate" inside another word is no rate.
    assert format_metric("x.accurate", 0.5) == "0.5"


def test_every_metric_is_on_a_card(runs: dict[str, Path], report: dict[str, Any]) -> None:
    metrics = read_json(runs["a"] / "metrics.json")
    shown = {item["metric"]: item for g in report["metric_groups"] for item in g["items"]}
    assert set(shown) == set(metrics)
    for name, value in metrics.items():
        assert shown[name]["text"] == format_metric(name, value)
    (group,) = report["metric_groups"]
    assert group["name"] == "judged" and group["main"] == "mean"
    counts = read_json(runs["a"] / "run.json")["counts"]
    assert group["failed"] == counts["failed"] + counts["bad_input"]


def test_the_header_reads_run_json(runs: dict[str, Path], report: dict[str, Any]) -> None:
    info = read_json(runs["a"] / "run.json")
    head = report["run"]
    assert head["flow"] == "judged" and head["status"] == "completed"
    assert head["counts"] == info["counts"]
    assert f"{info['tokens']['total_tokens']:,}" in head["tokens"]
    assert f"in {info['tokens']['calls']:,} calls" in head["tokens"]
    assert [u["node"] for u in head["tokens_by_node"]] == ["judge"]


def test_rows_table(runs: dict[str, Path], report: dict[str, Any]) -> None:
    table = report["table"]
    ids = [c["id"] for c in table["columns"]]
    assert ids == ["o.score", "o.result", "o.length", "i.question", "i.answer", "i.x"]
    recorded = outputs(runs["a"])
    assert [r["line"] for r in table["rows"]] == sorted(recorded)
    for row in table["rows"]:
        rec = recorded[row["line"]]
        assert row["status"] == rec["status"]
        cells = dict(zip(ids, row["cells"], strict=True))
        if rec["outputs"]:
            assert cells["o.score"] == rec["outputs"]["score"]
        assert row["invalid"] == (bool(rec["outputs"]) and rec["outputs"]["result"] == "invalid")
        assert (row["error"] is None) == (rec["status"] == "ok")
        assert row["seconds"] is None or row["seconds"] >= 0
    # A long cell is folded, with the count of what was left out.
    long_cell = dict(zip(ids, table["rows"][1]["cells"], strict=True))["i.answer"]
    assert long_cell.startswith(LONG[:CELL_CHARS]) and "more chars)" in long_cell


def test_traces_nest_sub_flows_and_keep_errors_and_prompts(report: dict[str, Any]) -> None:
    failed = report["traces"]["2"]
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "node": "check.measure",
        "type": "ValueError",
        "message": "x=2 is not allowed here",
    }
    nodes = {n["node"]: n for n in failed["nodes"]}
    assert set(nodes) == {"judge", "parse", "check", "check.measure"}
    assert nodes["check.measure"]["parent"] == "check"
    assert nodes["judge"]["parent"] is None
    assert nodes["check.measure"]["error"]["type"] == "ValueError"
    assert "Traceback" in nodes["check.measure"]["error"]["traceback"]
    judge = nodes["judge"]
    assert judge["llm"]["messages"][0][0] == "system"
    assert judge["llm"]["messages"][1][1].startswith("Question: Question number 2?")
    assert judge["output"] == "Score: 3"
    assert judge["llm"]["usage"]["total_tokens"] > 0
    starts = [n["node"] for n in failed["nodes"]]
    assert starts.index("check") < starts.index("check.measure")
    # The bad input row ran no node; the aggregates are row -1.
    assert report["traces"]["5"]["nodes"] == []
    assert [n["node"] for n in report["traces"]["-1"]["nodes"]] == ["summary"]


def test_long_trace_text_is_folded_at_max_chars(runs: dict[str, Path]) -> None:
    data = build_report(runs["a"], limits=Limits(max_chars=100))
    judge = next(n for n in data["traces"]["1"]["nodes"] if n["node"] == "judge")
    answer = dict(judge["inputs"])["answer"]
    assert answer.startswith(LONG[:100])
    assert answer.endswith(f"…({len(LONG) + len(' [[reply: Score: 4]]') - 100} more chars)")


def test_caps_keep_failed_rows_and_say_what_was_left_out(runs: dict[str, Path]) -> None:
    data = build_report(runs["a"], limits=Limits(max_rows=3, max_trace_rows=2))
    recorded = outputs(runs["a"])
    failed = [line for line, r in recorded.items() if r["status"] != "ok"]
    kept = [r["line"] for r in data["table"]["rows"]]
    assert kept == [0, 1, 2] + [line for line in failed if line > 2]
    assert sorted(k for k in data["traces"] if k != "-1") == sorted(str(x) for x in failed)
    limits = data["limits"]
    assert limits["rows"] == len(recorded)
    assert limits["rows_in_table"] == len(kept) and limits["rows_traced"] == len(failed)
    # The histograms still count every row.
    scores = [r["outputs"]["score"] for r in recorded.values() if r["outputs"]]
    (score,) = (h for h in data["histograms"] if h["name"] == "score")
    assert score["n"] == sum(isinstance(s, int) for s in scores)


def test_compare_reuses_compare_runs(runs: dict[str, Path]) -> None:
    data = build_report(runs["a"], compare_with=runs["b"])["compare"]
    expected = compare_runs(runs["a"], runs["b"])
    assert [m["name"] for m in data["metrics"]] == [m.name for m in expected.metrics]
    for shown, m in zip(data["metrics"], expected.metrics, strict=True):
        assert shown["verdict"] == m.verdict
        assert shown["delta"] == f"{m.delta:+.4g}"
    assert [c["line_a"] for c in data["changes"]] == [c.line_a for c in expected.changes]
    assert data["b"]["name"] == "b" and data["paired"] == expected.paired
    # Rows a comparison found changed get their traces first when traces are capped.
    capped = build_report(runs["a"], compare_with=runs["b"], limits=Limits(max_trace_rows=3))
    failed = {"2", "5"}
    assert set(capped["traces"]) - {"-1"} == failed | {str(expected.changes[0].line_a)}


def test_the_data_is_embedded_safely(report: dict[str, Any]) -> None:
    page = render_html(report)
    (embedded,) = DATA_SCRIPT.findall(page)
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded
    assert json.loads(embedded) == json.loads(json.dumps(report))
    assert HTML in embedded.encode().decode("unicode_escape")
    assert page.count("</script>") == 2  # the data's and the code's own, nothing from the data
    assert "@@FLOWKIT_" not in page
    # Nothing on the page points elsewhere.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert embed_json({"x": "</script><!--\u2028"}) == (
        '{"x":"\\u003c/script\\u003e\\u003c!--\\u2028"}'
    )


def test_the_report_command(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "sub" / "report.html"
    result = cli("report", runs["a"], "-o", out, "--compare", runs["b"], "--max-trace-rows", "3")
    assert result.exit_code == 0, result.output
    assert str(out) in result.stdout and "traces for 3" in result.stdout
    (embedded,) = DATA_SCRIPT.findall(out.read_text("utf-8"))
    data = json.loads(embedded)
    assert data["compare"]["b"]["name"] == "b" and data["limits"]["rows_traced"] == 3


def test_report_user_errors_exit_2_without_a_traceback(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    for args, message in (
        (["report", "nope", "--runs-dir", tmp_path, "-o", tmp_path / "r.html"], "no run folder"),
        (["report", runs["a"], "--compare", "missing-run", "-o", tmp_path / "r.html"], "no run"),
    ):
        result = cli(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert "Traceback" not in result.output
    # click itself refuses a folder for -o (a usage error, exit 2).
    folder = cli("report", runs["a"], "-o", tmp_path)
    assert folder.exit_code == 2 and "is a directory" in folder.stderr
