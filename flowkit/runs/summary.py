"""What `flowkit show` and the report say about a run's traces: the slowest nodes, the errors
grouped by node and type, and the rows each node failed in.

A run tallies this as it writes its records and leaves it in summary.json, so `show` over a
million rows reads a few kilobytes instead of gigabytes of traces.jsonl. The file names the sizes
of traces.jsonl and outputs.jsonl it describes: a folder changed since (a resume, an older
flowkit, a run still going) no longer matches, and the traces are read again in one pass.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from flowkit.data.jsonl import iter_jsonl

SUMMARY_FILE = "summary.json"
SUBFLOW_FAILED = "SubflowFailed"
"""A sub-flow node's error that only repeats one of its inner nodes' errors."""
_LINES = 5
"""Lines named per error group: the first ones, in line order."""


class Brief(msgspec.Struct):
    """The fields of a trace record that the summary needs; decoding skips the rest."""

    line: int
    node: str
    kind: str = "?"
    status: str = "?"
    duration: float = 0.0
    cache_hit: bool = False
    error: dict[str, Any] | None = None


decode_brief = msgspec.json.Decoder(Brief).decode


MAX_SUMMARY = 64 * 2**20
"""summary.json holds timings and error groups per node: far less than this."""


def _small_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most :data:`MAX_SUMMARY` bytes: a
    run folder may come from elsewhere (a cloned repository), and one whose summary.json was
    a link to /dev/zero ran ``flowkit show`` out of memory; a FIFO there blocked it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SUMMARY:
            raise ValueError(f"{path} is not a file of at most {MAX_SUMMARY} bytes")
        return f.read(MAX_SUMMARY + 1)


@dataclass
class NodeTiming:
    node: str
    kind: str
    runs: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.runs if self.runs else 0.0


@dataclass
class ErrorGroup:
    node: str
    type: str
    count: int = 0
    example: str = ""
    lines: list[int] = field(default_factory=list)


@dataclass
class TraceSummary:
    slowest: list[NodeTiming]
    errors: list[ErrorGroup]
    # Rows in which a node (e.g. a suite's sub-flow) failed or did not run for a failure.
    failed_by_node: dict[str, int]


class Tally:
    """The summary, built one record at a time (by the writer, or by a pass over the traces)."""

    def __init__(self) -> None:
        self.timings: dict[str, NodeTiming] = {}
        self.errors: dict[tuple[str, str], ErrorGroup] = {}
        self.failed_by: dict[str, int] = {}

    def error(self, node: str, kind: str, message: str, line: int) -> None:
        group = self.errors.get((node, kind))
        if group is None:
            group = self.errors[(node, kind)] = ErrorGroup(node, kind, example=message)
        group.count += 1
        if len(group.lines) < _LINES or line < group.lines[-1]:
            group.lines = sorted([*group.lines, line])[:_LINES]

    def add(self, rec: Any) -> None:
        """One node record: a NodeRecord, or a Brief decoded from traces.jsonl."""
        status = rec.status
        if status != "ok":
            if status in ("failed", "upstream_failed") and rec.line >= 0:
                self.failed_by[rec.node] = self.failed_by.get(rec.node, 0) + 1
            err = rec.error
            if status == "failed" and err:
                kind = err.get("type", "?") if isinstance(err, dict) else err.type
                if kind != SUBFLOW_FAILED:
                    message = err.get("message") if isinstance(err, dict) else err.message
                    self.error(rec.node, str(kind), str(message), rec.line)
            if status != "failed":
                return
        if rec.cache_hit or rec.kind == "flow":
            return
        timing = self.timings.get(rec.node)
        if timing is None:
            timing = self.timings[rec.node] = NodeTiming(rec.node, rec.kind)
        timing.runs += 1
        timing.total += rec.duration

    def bad_input(self, line: int, err: Any) -> None:
        err = err if isinstance(err, dict) else {}
        self.error("(data)", str(err.get("type")), str(err.get("message")), line)

    def summary(self, top: int) -> TraceSummary:
        slowest = sorted(self.timings.values(), key=lambda t: t.total, reverse=True)[:top]
        grouped = sorted(self.errors.values(), key=lambda g: (-g.count, g.node, g.type))
        return TraceSummary(slowest, grouped, dict(self.failed_by))

    def snapshot(self, run_dir: Path) -> dict[str, Any]:
        """What summary.json holds, once the run's files are final."""
        return {
            "sizes": _sizes(run_dir),
            "timings": [asdict(t) for t in self.timings.values()],
            "errors": [asdict(g) for g in self.errors.values()],
            "failed_by_node": self.failed_by,
        }

    @classmethod
    def load(cls, run_dir: Path) -> Tally | None:
        """The saved tally, if it still describes the folder's files."""
        try:
            value = json.loads(_small_file(run_dir / SUMMARY_FILE))
            if value.get("sizes") != _sizes(run_dir):
                return None
            tally = cls()
            for t in value["timings"]:
                tally.timings[t["node"]] = NodeTiming(**t)
            for g in value["errors"]:
                tally.errors[(g["node"], g["type"])] = ErrorGroup(**g)
            tally.failed_by = {str(k): int(v) for k, v in value["failed_by_node"].items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        return tally


def _sizes(run_dir: Path) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for name in ("traces.jsonl", "outputs.jsonl"):
        try:
            sizes[name] = os.stat(run_dir / name).st_size
        except OSError:
            sizes[name] = None
    return sizes


def summarize(run_dir: Path, *, top: int = 5) -> TraceSummary:
    """Per-node time spent computing (cache hits, skipped nodes and sub-flow wrappers left out,
    since their time is not theirs), and errors grouped by (node, type): from summary.json when
    it matches the folder, else from one pass over traces.jsonl and outputs.jsonl."""
    tally = Tally.load(run_dir)
    if tally is None:
        tally = Tally()
        path = run_dir / "traces.jsonl"
        if path.is_file():
            with open(path, "rb") as f:
                for raw in f:
                    try:
                        tally.add(decode_brief(raw))
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        continue
        for row in iter_jsonl(run_dir / "outputs.jsonl"):
            if row.get("status") == "bad_input":
                tally.bad_input(row["line"], row.get("error"))
    return tally.summary(top)
