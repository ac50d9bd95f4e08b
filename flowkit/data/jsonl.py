"""JSONL read the way run folders need it: a torn last line (a run killed mid-write) and
blank lines are skipped, never fatal. Data files, run folders and resumption share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from flowkit.cache.canonical import loads


def iter_jsonl(path: Path) -> Any:
    """Records of a JSONL file; a torn last line (a run killed mid-write) is skipped."""
    if not path.is_file():
        return
    with open(path, "rb") as f:
        for _, value in raw_records(f):
            yield value


def raw_records(f: BinaryIO, end: int | None = None) -> Iterator[tuple[bytes, Any]]:
    """(line with its newline, decoded value) from ``f`` up to byte ``end``; blank and torn
    lines (a run killed mid-write) are skipped, so callers can copy what they keep byte for
    byte."""
    while end is None or f.tell() < end:
        raw = f.readline()
        if not raw:
            return
        if not raw.strip():
            continue
        try:
            value = loads(raw)
        except Exception:
            continue
        yield (raw if raw.endswith(b"\n") else raw + b"\n"), value


FOREIGN_OUTPUTS = Path("flow_outputs") / "output.jsonl"
"""Another tool's run folder: per-row outputs here and inputs in inputs.jsonl, each record
keyed by ``line_number`` (the row's 0-based index, as flowkit's ``line``)."""


def read_outputs(run_dir: Path) -> dict[int, dict[str, Any]]:
    if not (run_dir / "outputs.jsonl").is_file() and (run_dir / FOREIGN_OUTPUTS).is_file():
        return _read_line_numbered(run_dir)
    return {rec["line"]: rec for rec in iter_jsonl(run_dir / "outputs.jsonl")}


def read_usage(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Per row of an earlier run, from its trace: the tokens its model calls used (summed over
    every llm and embedding node) and its latency (first node start to last node end), for
    ``${run.usage.total_tokens}`` and ``${run.usage.latency_seconds}``."""
    rows: dict[int, dict[str, Any]] = {}
    for rec in iter_jsonl(run_dir / "traces.jsonl"):
        line = rec.get("line")
        if not isinstance(line, int) or line < 0:
            continue
        row = rows.setdefault(line, {"start": rec["start"], "end": rec["end"]})
        row["start"], row["end"] = min(row["start"], rec["start"]), max(row["end"], rec["end"])
        for key, value in ((rec.get("llm") or {}).get("usage") or {}).items():
            if isinstance(value, int):
                row[key] = row.get(key, 0) + value
    for row in rows.values():
        row["latency_seconds"] = row.pop("end") - row.pop("start")
    return rows


def _read_line_numbered(run_dir: Path) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    for part, file in (("inputs", Path("inputs.jsonl")), ("outputs", FOREIGN_OUTPUTS)):
        for rec in iter_jsonl(run_dir / file):
            if isinstance(rec, dict) and isinstance(rec.get("line_number"), int):
                line = rec.pop("line_number")
                records.setdefault(line, {"line": line, "inputs": {}, "outputs": {}})[part] = rec
    return records
