"""The two passes over a run folder that flowkit.inspect.otel_spans makes its spans from: the
plan (each row's time bounds, where each sub-flow starts, each row's status), then the node
records themselves, decoded into small structs that skip inputs, outputs and messages.

A million rows are planned in flat arrays indexed by line (:class:`PerLine`), not dicts of
objects, so the export's memory stays in megabytes.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from flowkit.engine.records import TRACE_VERSION
from flowkit.errors import UsageError


# -- reading the run --------------------------------------------------------------------------
class _Error(msgspec.Struct):
    type: str = "?"
    message: str = ""
    traceback: str | None = None


class _Request(msgspec.Struct):
    model: str = ""
    params: dict[str, Any] = {}


class _Llm(msgspec.Struct):
    model: str = ""
    request: _Request | None = None
    usage: dict[str, int] = {}
    finish_reason: str | None = None
    attempts: int = 1


class TraceRecord(msgspec.Struct):
    """The fields of a trace.NodeRecord a span needs; decoding skips inputs, output, messages."""

    line: int
    node: str
    kind: str = "?"
    status: str = "?"
    start: float = 0.0
    end: float = 0.0
    cache_hit: bool = False
    error: _Error | None = None
    llm: _Llm | None = None
    v: int = TRACE_VERSION


class OutputRow(msgspec.Struct):
    line: int
    status: str = "?"
    error: dict[str, Any] | None = None


class PerLine:
    """One number per row line in a flat array (lines run from 0 to the rows' count): a
    million rows take megabytes, where a dict of them takes hundreds."""

    def __init__(self, typecode: str, missing: float) -> None:
        self.values: array[float] = array(typecode)
        self.missing = missing

    def get(self, line: int) -> Any:
        return self.values[line] if 0 <= line < len(self.values) else self.missing

    def set(self, line: int, value: Any) -> None:
        size = len(self.values)
        if line >= size:  # grown by half again at least, so filling it costs O(rows)
            self.values.extend([self.missing] * (max(line + 1, size + size // 2) - size))
        self.values[line] = value


_OK, _NOT_OK = 1, 2  # Plan.status codes; 0: no row in outputs.jsonl


@dataclass
class Plan:
    """What the first pass learns: enough to start any span before its children."""

    size: int = 0  # bytes of whole lines read; the second pass stops there (a live run grows)
    starts: PerLine = field(default_factory=lambda: PerLine("d", math.nan))
    ends: PerLine = field(default_factory=lambda: PerLine("d", math.nan))
    flow_starts: dict[tuple[int, str], float] = field(default_factory=dict)
    status: PerLine = field(default_factory=lambda: PerLine("b", 0))
    """Each row's place in outputs.jsonl: ok, not ok (its record is in ``failed``), or none."""
    failed: dict[int, OutputRow] = field(default_factory=dict)
    start: float = float("inf")
    end: float = 0.0

    def bounds(self, line: int) -> tuple[float, float] | None:
        start = self.starts.get(line)
        return None if start != start else (start, self.ends.get(line))

    def output(self, line: int) -> OutputRow | None:
        code = self.status.get(line)
        return OutputRow(line, "ok") if code == _OK else self.failed.get(line)

    def lines_with_output(self) -> Any:
        return (line for line, code in enumerate(self.status.values) if code)


def _lines(path: Path, limit: int | None = None) -> Any:
    """Whole lines of a file, up to ``limit`` bytes; a torn last line is left out."""
    if not path.is_file():
        return
    seen = 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n") or (limit is not None and seen + len(raw) > limit):
                return
            seen += len(raw)
            yield raw


def _decoded(lines: Any, decoder: msgspec.json.Decoder[Any]) -> Any:
    for raw in lines:
        try:
            rec = decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if getattr(rec, "v", TRACE_VERSION) > TRACE_VERSION:
            raise UsageError(
                f"traces.jsonl has records of version {rec.v}; this flowkit reads "
                f"version {TRACE_VERSION}",
                hint="upgrade flowkit",
            )
        yield rec


def read_plan(run_dir: Path) -> Plan:
    plan = Plan()
    path = run_dir / "traces.jsonl"

    def counted() -> Any:
        for raw in _lines(path):
            plan.size += len(raw)
            yield raw

    for rec in _decoded(counted(), msgspec.json.Decoder(TraceRecord)):
        plan.start, plan.end = min(plan.start, rec.start), max(plan.end, rec.end)
        if rec.line >= 0:
            start = plan.starts.get(rec.line)
            if start != start or rec.start < start:  # NaN: the row's first record
                plan.starts.set(rec.line, rec.start)
            if not rec.end <= plan.ends.get(rec.line):  # NaN compares false
                plan.ends.set(rec.line, rec.end)
        if rec.kind == "flow":
            plan.flow_starts[(rec.line, rec.node)] = rec.start
    for row in _decoded(_lines(run_dir / "outputs.jsonl"), msgspec.json.Decoder(OutputRow)):
        if row.line < 0:
            continue
        plan.status.set(row.line, _OK if row.status == "ok" else _NOT_OK)
        if row.status != "ok":
            plan.failed[row.line] = row
    return plan


def records(run_dir: Path, plan: Plan) -> Any:
    """The second pass: the node records the plan was made from, and no more (a live run
    grows meanwhile, and a record the plan has not seen could lack its row's bounds)."""
    lines = _lines(run_dir / "traces.jsonl", plan.size)
    return _decoded(lines, msgspec.json.Decoder(TraceRecord))
