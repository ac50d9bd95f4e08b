"""Run folders: run.json, outputs.jsonl (input order), metrics.json and traces.jsonl."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flowkit
from flowkit.data.jsonl import iter_jsonl
from flowkit.engine.records import NodeRecord, decode
from flowkit.errors import UsageError
from flowkit.flow.loader import load_flow
from flowkit.runs.folder import RunWriter, new_run_dir, resolve_run_dir
from tests.support import read_json, read_jsonl, write, write_jsonl

NODES = """
import asyncio


async def nap(x, rows):
    await asyncio.sleep((rows - x) * 0.03)  # the first row finishes last
    return x * 10


def total(values):
    return {"sum": sum(values), "n": len(values)}
"""

FLOW = """
    name: ordered
    inputs: {x: {type: integer}, rows: {type: integer, default: 6}}
    outputs: {y: ${n.output}}
    nodes:
      - {name: n, type: python, source: nodes.py, function: nap,
         inputs: {x: ${inputs.x}, rows: ${inputs.rows}}}
      - {name: t, type: aggregate, source: nodes.py, function: total, inputs: {values: ${n.output}}}
    """


@pytest.fixture
def finished(tmp_path: Path) -> flowkit.api.RunResult:
    write(tmp_path / "nodes.py", NODES)
    write(tmp_path / "ordered.yaml", FLOW)
    rows = [{"x": i} for i in range(6)]
    rows.insert(3, {"y": "no x here"})  # a bad row in the middle: line 3
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    return flowkit.run(
        tmp_path / "ordered.yaml",
        data,
        cache_dir=tmp_path / "cache",
        runs_root=tmp_path / "runs",
        concurrency=8,
    )


def test_outputs_are_in_input_order_though_rows_finish_out_of_order(
    finished: flowkit.api.RunResult,
) -> None:
    finish_order = [
        t["line"] for t in read_jsonl(finished.run_dir / "traces.jsonl") if t["node"] == "n"
    ]
    assert finish_order != sorted(finish_order)
    outputs = read_jsonl(finished.run_dir / "outputs.jsonl")
    assert [r["line"] for r in outputs] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["status"] for r in outputs] == ["ok"] * 3 + ["bad_input"] + ["ok"] * 3
    assert outputs[0] == {
        "line": 0,
        "status": "ok",
        "inputs": {"x": 0, "rows": 6},
        "outputs": {"y": 0},
    }
    assert [r["outputs"]["y"] for r in outputs if r["status"] == "ok"] == [0, 10, 20, 30, 40, 50]
    bad = outputs[3]
    assert bad["inputs"] is None and bad["outputs"] is None
    assert bad["error"]["type"] == "DataError"
    assert re.fullmatch(r".*data\.jsonl:4: input 'x': .*", bad["error"]["message"])
    assert list(finished.rows()) == outputs


def test_run_json_records_the_run(finished: flowkit.api.RunResult, tmp_path: Path) -> None:
    info = read_json(finished.run_dir / "run.json")
    assert info == finished.info
    assert info["format"] == "flowkit.run" and info["version"] == 1
    assert info["run_id"] == finished.run_dir.name
    assert re.fullmatch(r"ordered-\d{8}-\d{6}-[0-9a-f]{6}", info["run_id"])
    assert info["status"] == "completed"
    assert info["flow"]["name"] == "ordered"
    assert info["flow"]["hash"] == load_flow(tmp_path / "ordered.yaml").content_hash
    assert info["mapping"] == {"x": "${data.x}", "rows": "${data.rows}"}
    assert info["options"]["concurrency"] == 8
    assert info["counts"] | {"cache_misses": 0} == {
        "rows": 7,
        "succeeded": 6,
        "failed": 0,
        "invalid": 0,
        "bad_input": 1,
        "node_runs": 6,
        "node_failures": 0,
        "cache_hits": 0,
        "cache_misses": 0,
    }
    assert info["tokens"] == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "calls": 0,
    }
    assert info["aggregates"] == {"t": {"rows_used": 6, "rows_left_out": 0, "status": "ok"}}
    assert info["started"] <= info["ended"]
    assert info["duration_seconds"] >= 0
    assert info["flowkit_version"] == flowkit.__version__


def test_metrics_json_holds_the_aggregates(finished: flowkit.api.RunResult) -> None:
    assert (
        read_json(finished.run_dir / "metrics.json")
        == finished.metrics
        == {"ordered.sum": 150, "ordered.n": 6}
    )


def test_trace_records(finished: flowkit.api.RunResult) -> None:
    raw = (finished.run_dir / "traces.jsonl").read_bytes().splitlines()
    records = [decode(line) for line in raw]
    assert all(isinstance(r, NodeRecord) and r.v == 1 for r in records)
    assert all(r.run_id == finished.run_id for r in records)
    assert sorted((r.line, r.node) for r in records) == [
        (-1, "t"),
        *((i, "n") for i in (0, 1, 2, 4, 5, 6)),
    ]
    n0 = next(r for r in records if (r.line, r.node) == (0, "n"))
    assert (n0.kind, n0.status, n0.cache_hit) == ("python", "ok", False)
    assert n0.inputs is None and n0.output == 0  # --trace compact leaves python inputs out
    assert n0.start <= n0.end and n0.duration == pytest.approx(n0.end - n0.start, abs=1e-6)
    assert n0.duration >= 0.15  # it slept 6 × 0.03 s
    assert n0.error is None and n0.llm is None


def test_an_output_folder_and_a_run_name(tmp_path: Path, finished: flowkit.api.RunResult) -> None:
    data = write_jsonl(tmp_path / "two.jsonl", [{"x": 1}])
    out = flowkit.run(
        tmp_path / "ordered.yaml", data, output=tmp_path / "here", cache_dir=tmp_path / "cache"
    )
    assert out.run_dir == tmp_path / "here" and (out.run_dir / "run.json").is_file()
    named = flowkit.run(
        tmp_path / "ordered.yaml",
        data,
        name="baseline",
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    assert named.run_dir == tmp_path / "runs" / "baseline"
    with pytest.raises(UsageError) as info:
        flowkit.run(
            tmp_path / "ordered.yaml",
            data,
            name="baseline",
            runs_root=tmp_path / "runs",
            cache_dir=tmp_path / "cache",
        )
    assert str(info.value) == (
        f"run folder {str(tmp_path / 'runs' / 'baseline')!r} already exists and holds a run\n"
        "  hint: choose another --output or --name, or --overwrite (overwrite=True in Python)"
    )
    again = flowkit.run(
        tmp_path / "ordered.yaml",
        data,
        name="baseline",
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        overwrite=True,
    )
    assert again.run_dir == named.run_dir and again.status == "completed"


def test_the_writer_holds_rows_back_until_earlier_ones_arrive(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "r", {"flow": {"name": "f"}})
    assert read_json(tmp_path / "r" / "run.json")["status"] == "running"
    writer.row(2, {"line": 2})
    writer.row(1, {"line": 1})
    writer.flush()
    assert (tmp_path / "r" / "outputs.jsonl").read_text() == ""
    writer.row(0, {"line": 0})
    writer.row(4, {"line": 4})  # row 3 never comes (say the run was interrupted)
    writer.flush()
    assert [r["line"] for r in read_jsonl(tmp_path / "r" / "outputs.jsonl")] == [0, 1, 2]
    writer.close("interrupted", None)
    assert [r["line"] for r in read_jsonl(tmp_path / "r" / "outputs.jsonl")] == [0, 1, 2, 4]
    info = read_json(tmp_path / "r" / "run.json")
    assert info["status"] == "interrupted" and "ended" in info
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "o.jsonl", '{"line": 0}\n{"line": 1}\n{"li')
    assert list(iter_jsonl(path)) == [{"line": 0}, {"line": 1}]
    assert list(iter_jsonl(tmp_path / "missing.jsonl")) == []


def test_resolving_a_run_by_path_name_or_prefix(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for name in ("f1-20260101-000000-aaaaaa", "f1-20260102-000000-bbbbbb", "judge-1"):
        write(root / name / "run.json", "{}")
    assert resolve_run_dir(root / "judge-1", root) == root / "judge-1"
    assert resolve_run_dir("judge", root) == root / "judge-1"
    assert resolve_run_dir("f1-20260102", root) == root / "f1-20260102-000000-bbbbbb"
    with pytest.raises(UsageError) as info:
        resolve_run_dir("f1-", root)
    assert str(info.value) == (
        "run 'f1-' is ambiguous: f1-20260101-000000-aaaaaa, f1-20260102-000000-bbbbbb\n"
        "  hint: give more of the name"
    )
    with pytest.raises(UsageError) as info:
        resolve_run_dir("nope", root)
    assert str(info.value).startswith("no run folder 'nope'")
    write(root / "judge-1-b" / "run.json", "{}")
    assert resolve_run_dir("judge-1", root) == root / "judge-1"  # the exact name wins
    for missing in (tmp_path / "gone", "runs/gone", "f1-*"):  # paths and glob characters
        with pytest.raises(UsageError) as info:
            resolve_run_dir(missing, root)
        assert str(info.value).startswith(f"no run folder '{missing}'")


def test_new_run_dir_names(tmp_path: Path) -> None:
    assert re.fullmatch(r"flow-\d{8}-\d{6}-[0-9a-f]{6}", new_run_dir(tmp_path, "flow").name)
    assert new_run_dir(tmp_path, "flow", "mine") == tmp_path / "mine"
