"""Large runs stay usable: `--trace compact` (the default) writes python nodes' successes short,
and `show` reads the run's summary.json instead of its traces. (How far this goes at a million
rows is measured by benchmarks/large_run.py, not here.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.runs.summary import SUMMARY_FILE, summarize
from tests.support import python_flow, read_json, read_jsonl, write_jsonl

MODULE = (
    "from pathlib import Path\n\n"
    "def f(x):\n"
    "    if x == 3 and not Path('fixed').exists():\n"
    "        raise ValueError('three is bad')\n"
    "    return x * 2\n\n"
    "def total(ys):\n"
    "    return {'sum': sum(y for y in ys if y is not None)}\n"
)


def _project(tmp_path: Path) -> Path:
    python_flow(tmp_path, MODULE, "total", node="total")
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(8)])
    return tmp_path


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code in (0, 1), result.output
    return result.output


def test_compact_traces_leave_out_python_inputs_and_keep_failures_whole(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    _cli("run", "t.yaml", "--data", "d.jsonl", "--no-cache", "-q", "--name", "compact")
    _cli(
        "run",
        "t.yaml",
        "--data",
        "d.jsonl",
        "--no-cache",
        "-q",
        "--name",
        "full",
        "--trace",
        "full",
    )
    compact = {
        (r["line"], r["node"]): r for r in read_jsonl(tmp_path / "runs/compact/traces.jsonl")
    }
    full = {(r["line"], r["node"]): r for r in read_jsonl(tmp_path / "runs/full/traces.jsonl")}
    assert compact.keys() == full.keys()
    ok = compact[(0, "n")]
    assert sorted(ok) == sorted(
        ["run_id", "line", "node", "kind", "status", "start", "end", "duration", "output"]
    )
    assert full[(0, "n")]["inputs"] == {"x": 0}
    failed = compact[(3, "n")]  # a failure keeps its inputs and its error
    assert failed["inputs"] == {"x": 3}
    assert failed["error"]["message"] == "three is bad"
    for key, rec in full.items():
        assert compact[key]["output"] == rec["output"]
    assert read_json(tmp_path / "runs/compact/run.json")["options"]["trace"] == "compact"
    assert read_json(tmp_path / "runs/compact/metrics.json") == read_json(
        tmp_path / "runs/full/metrics.json"
    )
    size = {n: (tmp_path / "runs" / n / "traces.jsonl").stat().st_size for n in ("compact", "full")}
    assert size["compact"] < size["full"]

    shown = _cli("trace", "compact", "--row", "0")
    assert "inputs not kept (run with --trace full to keep them)" in shown
    assert "output: 0" in shown
    assert "inputs not kept" not in _cli("trace", "full", "--row", "0")
    assert "x: 3" in _cli("trace", "compact", "--row", "3")


def test_resuming_a_compact_run_recomputes_its_aggregates(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    _cli("run", "t.yaml", "--data", "d.jsonl", "--no-cache", "-q", "--name", "r")
    (tmp_path / "fixed").touch()  # the failing row's cause is gone
    _cli("run", "--resume", "r", "-q")
    info = read_json(tmp_path / "runs/r/run.json")
    assert (info["status"], info["counts"]["succeeded"]) == ("completed", 8)
    assert read_json(tmp_path / "runs/r/metrics.json")["t.sum"] == 2 * sum(range(8))
    lines = {r["line"] for r in read_jsonl(tmp_path / "runs/r/traces.jsonl") if r["node"] == "n"}
    assert lines == set(range(8))


def test_a_bad_trace_level_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    result = CliRunner().invoke(main, ["run", "t.yaml", "--data", "d.jsonl", "--trace", "none"])
    assert result.exit_code == 2
    assert "Invalid value for '--trace': 'none' is not one of 'full', 'compact'." in result.output


def test_show_reads_the_summary_the_run_kept_and_not_a_stale_one(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(8)] + [{"y": 1}])
    _cli("run", "t.yaml", "--data", "d.jsonl", "--no-cache", "-q", "--name", "r")
    run_dir = tmp_path / "runs" / "r"
    kept = summarize(run_dir)
    saved = json.loads((run_dir / SUMMARY_FILE).read_text())
    # What the run tallied is what a pass over its files finds.
    (run_dir / SUMMARY_FILE).rename(tmp_path / "aside.json")
    scanned = summarize(run_dir)
    assert (kept.errors, kept.failed_by_node) == (scanned.errors, scanned.failed_by_node)
    # A compact trace keeps durations to the microsecond; the run tallied them unrounded.
    assert [(t.node, t.runs) for t in kept.slowest] == [(t.node, t.runs) for t in scanned.slowest]
    for a, b in zip(kept.slowest, scanned.slowest, strict=True):
        assert a.total == pytest.approx(b.total, abs=1e-5)
    assert [(g.node, g.type, g.count, g.lines) for g in scanned.errors] == [
        ("(data)", "DataError", 1, [8]),
        ("n", "ValueError", 1, [3]),
    ]
    assert scanned.failed_by_node == {"n": 1}
    assert {t.node: t.runs for t in scanned.slowest} == {"n": 8, "total": 1}

    # The summary is what `show` reads: traces.jsonl of the same size but unreadable changes
    # nothing, while a traces.jsonl that grew makes it read the traces again.
    (tmp_path / "aside.json").rename(run_dir / SUMMARY_FILE)
    traces = run_dir / "traces.jsonl"
    original = traces.read_bytes()
    traces.write_bytes(b"x" * (len(original) - 1) + b"\n")
    shown = _cli("show", "r")
    assert "three is bad" in shown and "slowest nodes" in shown
    row0 = next(raw for raw in original.splitlines(keepends=True) if b'"line":0,"node":"n"' in raw)
    traces.write_bytes(original + row0)
    assert {t.node: t.runs for t in summarize(run_dir).slowest} == {"n": 9, "total": 1}
    assert saved["sizes"]["traces.jsonl"] == len(original)
