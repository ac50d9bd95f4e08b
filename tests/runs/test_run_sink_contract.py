"""The RunSink contract: what the engine relies on of wherever a run's rows and trace records go,
checked over every implementation: the run folder (full and compact traces) and the scale-out
worker's in-memory sink."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flowkit.engine.records import (
    FAILED,
    OK,
    SKIPPED,
    TRACE_VERSION,
    ErrorInfo,
    LlmCall,
    NodeRecord,
    decode,
    encode_compact,
)
from flowkit.engine.sink import RunSink
from flowkit.runs.backends import MemoryWriter
from flowkit.runs.folder import COMPLETED, RunWriter


@dataclass
class Opened:
    """A sink, and how to read back what reached it once the run is over."""

    sink: RunSink
    run_id: str
    finish: Callable[[], tuple[list[bytes], dict[int, dict[str, Any]]]]
    """Ends the run; (trace lines, rows by index)."""
    kept: Callable[[NodeRecord], NodeRecord] = lambda record: record
    """The record as this sink's trace level keeps it."""


def _folder(tmp_path: Path, trace: str) -> Opened:
    folder = tmp_path / "run-1"
    writer = RunWriter(folder, {"flow": {"name": "f"}, "options": {"trace": trace}})

    def finish() -> tuple[list[bytes], dict[int, dict[str, Any]]]:
        writer.close(COMPLETED, None)
        lines = (folder / "traces.jsonl").read_bytes().splitlines()
        rows = [json.loads(line) for line in (folder / "outputs.jsonl").read_bytes().splitlines()]
        return lines, {row["line"]: row for row in rows}

    kept = (lambda r: decode(encode_compact(r))) if trace == "compact" else (lambda r: r)
    return Opened(writer, "run-1", finish, kept)


def _worker(tmp_path: Path) -> Opened:
    writer = MemoryWriter("run-1")
    return Opened(writer, "run-1", lambda: (writer.traces, dict(writer.rows)))


SINKS: dict[str, Callable[[Path], Opened]] = {
    "run-folder": lambda tmp: _folder(tmp, "full"),
    "run-folder-compact": lambda tmp: _folder(tmp, "compact"),
    "worker": _worker,
}


@pytest.fixture(params=sorted(SINKS))
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Opened:
    return SINKS[request.param](tmp_path)


def _records(run_id: str) -> list[NodeRecord]:
    llm = LlmCall("m-1", [{"role": "user", "content": "q"}], {"total_tokens": 3}, "stop")
    error = ErrorInfo("ValueError", "bad", "Traceback…")
    return [
        NodeRecord(run_id, 1, "parse", "python", OK, 1.0, 1.5, 0.5, inputs={"x": 1}, output=[1]),
        NodeRecord(run_id, 0, "judge", "llm", OK, 1.0, 2.0, 1.0, inputs={"q": "é"}, llm=llm),
        NodeRecord(run_id, 0, "parse", "python", FAILED, 2.0, 2.1, 0.1, error=error),
        NodeRecord(run_id, 2, "gate", "python", SKIPPED, 3.0, 3.0, 0.0),
        NodeRecord(run_id, 1, "parse", "python", OK, 4.0, 4.0, 0.0, cache_hit=True, output=1e-11),
    ]


def test_the_run_id_is_the_runs(opened: Opened) -> None:
    assert opened.sink.run_id == opened.run_id


def test_traces_are_read_back_as_the_same_typed_records_in_order(opened: Opened) -> None:
    records = _records(opened.sink.run_id)
    for record in records:
        opened.sink.trace(record)
        opened.sink.maybe_flush()
    lines, _ = opened.finish()
    assert [decode(line) for line in lines] == [opened.kept(r) for r in records]


def test_traces_are_json_lines(opened: Opened) -> None:
    for record in _records(opened.sink.run_id):
        opened.sink.trace(record)
    lines, _ = opened.finish()
    parsed = [json.loads(line) for line in lines]
    # A compact line leaves out fields at their defaults, the version among them.
    assert [(p.get("v", TRACE_VERSION), p["run_id"], p["line"], p["node"]) for p in parsed] == [
        (TRACE_VERSION, "run-1", r.line, r.node) for r in _records("run-1")
    ]


def test_rows_given_in_any_order_are_read_back_by_index(opened: Opened) -> None:
    rows = {i: {"line": i, "status": "ok", "outputs": {"score": i / 3}} for i in range(5)}
    for i in (3, 0, 4, 1, 2):
        opened.sink.row(i, rows[i])
        assert isinstance(opened.sink.maybe_flush(), bool)
    _, back = opened.finish()
    assert back == rows


def test_the_runs_record_takes_what_the_engine_adds(opened: Opened) -> None:
    # The engine adds warnings (and their counts) to the run's record while rows run: each sink
    # hands out one dict that holds them, the same one each time.
    info = opened.sink.info
    assert isinstance(info, dict) and opened.sink.info is info
    notices = info.setdefault("notices", [])
    notices.append("warning: node 'n' returned no key 'x'")
    assert opened.sink.info["notices"] == ["warning: node 'n' returned no key 'x'"]
