"""Reading a run folder for `flowkit report`: the rows table, every row's numbers (for the
histograms) and the node traces the page embeds, each within the caps of `Limits`.

outputs.jsonl is read once and traces.jsonl once; a trace record is decoded into a small struct
(its line and times) and only the records of the rows the page keeps a trace for are decoded in
full, so a run whose traces run to gigabytes is read at the speed of the disk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from flowkit.cache.canonical import loads
from flowkit.data.jsonl import iter_jsonl
from flowkit.inspect.compare_rows import numeric_outputs
from flowkit.inspect.trace_view import fold

CELL_CHARS = 200
# Past these many columns a side (inputs, outputs) the table would be unreadable anyway.
MAX_COLUMNS = 40


@dataclass(frozen=True)
class Limits:
    """How much of a run the page embeds (the caps are described in flowkit.inspect.report)."""

    max_rows: int = 20_000
    max_trace_rows: int = 1_000
    max_chars: int = 2_000


def _text(value: Any, max_chars: int) -> str | None:
    """A value as display text: strings as they are, anything else as indented JSON."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return fold(value, max_chars)


def _tail(text: str | None, max_chars: int) -> str | None:
    """Fold keeping the end: a traceback's last lines name the error."""
    if text is None or max_chars <= 0 or len(text) <= max_chars:
        return text
    return f"…({len(text) - max_chars} chars before)\n{text[-max_chars:]}"


# -- rows, histograms ----------------------------------------------------------------------------
def leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, leaf) of a row's outputs; nested dicts (a suite's) flatten as compare's
    numeric outputs do, so a histogram and its table column share a name."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item:
                yield from leaves(item, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", item
    elif prefix == "" and value is not None:
        yield "output", value


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return fold(value, CELL_CHARS)


def _error_text(err: dict[str, Any] | None) -> str | None:
    if not err:
        return None
    where = f"{err['node']}: " if err.get("node") else ""
    return fold(f"{where}{err.get('type')}: {err.get('message')}", CELL_CHARS)


def _is_invalid(outputs: Any) -> bool:
    return any(
        path.rpartition(".")[2] == "result" and value == "invalid"
        for path, value in leaves(outputs)
    )


@dataclass
class Rows:
    """One pass over outputs.jsonl: the table's rows, every row's numbers, the statuses."""

    # Column name → whether any kept row has a value there (empty columns are left out).
    inputs: dict[str, bool] = field(default_factory=dict)
    outputs: dict[str, bool] = field(default_factory=dict)
    kept: list[dict[str, Any]] = field(default_factory=list)
    numbers: dict[str, list[float]] = field(default_factory=dict)
    total: int = 0
    failed: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    by_line: dict[int, dict[str, Any]] = field(default_factory=dict)


def read_rows(run_dir: Path, limits: Limits) -> Rows:
    rows = Rows()
    extra = 0
    for rec in iter_jsonl(run_dir / "outputs.jsonl"):
        rows.total += 1
        line, status, outputs = rec.get("line", -1), rec.get("status", "?"), rec.get("outputs")
        invalid = _is_invalid(outputs)
        if status != "ok":
            rows.failed.append(line)
        elif invalid:
            rows.invalid.append(line)
        for name, number in numeric_outputs(outputs):
            rows.numbers.setdefault(name, []).append(number)
        if len(rows.kept) >= limits.max_rows:
            if status == "ok" or extra >= limits.max_rows:
                continue
            extra += 1
        flat = dict(leaves(outputs))
        inputs = rec.get("inputs") if isinstance(rec.get("inputs"), dict) else {}
        for names, found in ((rows.outputs, flat), (rows.inputs, inputs)):
            for name, value in found.items():
                if name in names:
                    names[name] = names[name] or value is not None
                elif len(names) < MAX_COLUMNS:
                    names[name] = value is not None
        entry = {
            "line": line,
            "status": status,
            "invalid": invalid,
            "o": flat,
            "i": inputs,
            "error": _error_text(rec.get("error")),
            "seconds": None,
        }
        rows.kept.append(entry)
        rows.order.append(line)
        rows.by_line[line] = {"rec": rec, "entry": entry}
    return rows


def table_data(rows: Rows) -> dict[str, Any]:
    """Columns, and each row's cells aligned with them (arrays keep a 10k-row page small);
    a column no kept row has a value in is left out."""
    outs = [name for name, filled in rows.outputs.items() if filled]
    ins = [name for name, filled in rows.inputs.items() if filled]
    columns = [
        *({"id": f"o.{n}", "label": n, "group": "output"} for n in outs),
        *({"id": f"i.{n}", "label": n, "group": "input"} for n in ins),
    ]
    table = []
    for entry in rows.kept:
        cells = [_cell(entry["o"].get(n)) for n in outs] + [_cell(entry["i"].get(n)) for n in ins]
        table.append(
            {
                "line": entry["line"],
                "status": entry["status"],
                "invalid": entry["invalid"],
                "seconds": entry["seconds"],
                "error": entry["error"],
                "cells": cells,
            }
        )
    return {"columns": columns, "rows": table}


def histogram(name: str, values: list[float], *, max_bins: int = 20) -> dict[str, Any]:
    """Bins for one per-row number: one per integer on small integer scales (1–5, 0/1),
    tenths on 0–1, else equal widths. A bin is [lo, hi), the last one closed; an integer
    bin holds exactly lo (lo == hi, closed)."""
    lo, hi = min(values), max(values)
    bins: list[dict[str, Any]] = []
    if all(v.is_integer() for v in values) and hi - lo <= 30:
        for k in range(int(lo), int(hi) + 1):
            bins.append({"lo": k, "hi": k, "closed": True, "label": str(k), "count": 0})
        for v in values:
            bins[int(v) - int(lo)]["count"] += 1
    else:
        if lo >= 0 and hi <= 1:
            lo, hi, n = 0.0, 1.0, 10
        else:
            n = 1 if lo == hi else min(max_bins, max(5, math.ceil(math.sqrt(len(values)))))
        width = (hi - lo) / n or 1.0
        for i in range(n):
            a, b = lo + i * width, hi if i == n - 1 else lo + (i + 1) * width
            bins.append({"lo": a, "hi": b, "closed": i == n - 1, "label": "", "count": 0})
        for v in values:
            bins[min(int((v - lo) / width), n - 1)]["count"] += 1
    return {
        "name": name,
        "n": len(values),
        "mean": math.fsum(values) / len(values),
        "min": min(values),
        "max": max(values),
        "bins": bins,
    }


# -- traces ---------------------------------------------------------------------------------------
class _Span(msgspec.Struct):
    """The fields every trace record is decoded into; the rest of the line is skipped."""

    line: int
    start: float = 0.0
    end: float = 0.0


def trace_lines(rows: Rows, changed: Iterable[int], cap: int) -> list[int]:
    """Which rows get their trace embedded: failed, changed most, invalid, then in order."""
    picked: dict[int, None] = {}
    for group in (rows.failed, changed, rows.invalid, rows.order):
        for line in group:
            if len(picked) >= cap:
                return list(picked)
            if line in rows.by_line:
                picked[line] = None
    return list(picked)


def _node(rec: dict[str, Any], parent: str | None, max_chars: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node": rec.get("node", "?"),
        "parent": parent,
        "kind": rec.get("kind", "?"),
        "status": rec.get("status", "?"),
        "duration": rec.get("duration"),
        "cache_hit": bool(rec.get("cache_hit")),
        "inputs": [[k, _text(v, max_chars)] for k, v in (rec.get("inputs") or {}).items()],
        "output": _text(rec.get("output"), max_chars),
        "has_output": rec.get("status") == "ok" or rec.get("output") is not None,
    }
    llm = rec.get("llm")
    if llm:
        usage = llm.get("usage") or {}
        out["llm"] = {
            "model": llm.get("model"),
            "messages": [
                [str(m.get("role", "?")), _text(m.get("content", ""), max_chars)]
                for m in llm.get("messages") or ()
            ],
            "raw": _text(llm.get("raw"), max_chars),
            "usage": {
                k: usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
            },
            "finish_reason": llm.get("finish_reason"),
            "attempts": llm.get("attempts", 1),
        }
    error = rec.get("error")
    if error:
        out["error"] = {
            "type": error.get("type"),
            "message": fold(str(error.get("message")), max_chars),
            "traceback": _tail(error.get("traceback"), max_chars),
        }
    return out


def _parents(records: list[dict[str, Any]]) -> list[str | None]:
    """Each record's parent node, as `flowkit trace` nests them: a sub-flow's nodes are
    ``parent.child``, under the nearest ancestor that has a record of its own."""
    names = {r.get("node") for r in records}
    parents: list[str | None] = []
    for rec in records:
        parent = str(rec.get("node", "")).rpartition(".")[0]
        while parent and parent not in names:
            parent = parent.rpartition(".")[0]
        parents.append(parent or None)
    return parents


def read_traces(
    run_dir: Path, rows: Rows, wanted: set[int], max_chars: int
) -> dict[int, list[dict[str, Any]]]:
    """One pass over traces.jsonl: each table row's time, and the records of the wanted rows
    (and the aggregates, line -1). Only the wanted lines are decoded in full."""
    path = run_dir / "traces.jsonl"
    found: dict[int, list[dict[str, Any]]] = {}
    spans: dict[int, list[float]] = {}
    if path.is_file():
        decoder = msgspec.json.Decoder(_Span)
        with open(path, "rb") as f:
            for raw in f:
                try:
                    span = decoder.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # a torn last line, or not a record
                if span.line in rows.by_line and span.end:
                    s = spans.setdefault(span.line, [span.start, span.end])
                    s[0], s[1] = min(s[0], span.start), max(s[1], span.end)
                if span.line in wanted or span.line < 0:
                    record = loads(raw)
                    if isinstance(record, dict):
                        found.setdefault(span.line, []).append(record)
    for line, (start, end) in spans.items():
        rows.by_line[line]["entry"]["seconds"] = round(end - start, 6)
    traces = {}
    for line, records in found.items():
        records.sort(key=lambda r: r.get("start") or 0.0)
        traces[line] = [
            _node(rec, parent, max_chars)
            for rec, parent in zip(records, _parents(records), strict=True)
        ]
    return traces


def trace_entry(
    rows: Rows, line: int, nodes: list[dict[str, Any]], max_chars: int
) -> dict[str, Any]:
    """The row as the trace panel heads it: status, inputs, outputs and error, then its nodes."""
    rec = (rows.by_line.get(line) or {}).get("rec") or {}
    err = rec.get("error")
    return {
        "status": rec.get("status") or ("aggregates" if line < 0 else "?"),
        "inputs": [[k, _text(v, max_chars)] for k, v in (rec.get("inputs") or {}).items()],
        "outputs": [[k, _text(v, max_chars)] for k, v in leaves(rec.get("outputs"))],
        "error": None
        if not err
        else {
            "node": err.get("node"),
            "type": err.get("type"),
            "message": fold(str(err.get("message")), max_chars),
        },
        "nodes": nodes,
    }
