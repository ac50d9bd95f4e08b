"""Resuming a run: keep the rows that finished, run the others, recompute the aggregates.

A row is kept when outputs.jsonl has it with status ``ok`` and traces.jsonl has a record for
each of its top-level nodes (the writer flushes traces before outputs, so a row that reached
outputs after a kill -9 normally has all of them). Failed, bad-input, missing and torn rows run
again. The aggregates need every row's values, not only the new ones: the kept rows' values are
read back from their trace records into the same per-row scopes a live run builds, so the
aggregate phase cannot tell a resumed run from an uninterrupted one.

Before anything runs the folder is rewritten to hold only the kept rows (each file replaced
atomically), so an interrupted resume leaves a folder that can be resumed again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowkit.data.jsonl import FOREIGN_OUTPUTS, raw_records
from flowkit.engine.bound import BoundFlow
from flowkit.engine.context import Stats
from flowkit.engine.executor import Executor
from flowkit.engine.plan import AggTask, collect
from flowkit.engine.records import OK
from flowkit.engine.scope import Scope, has_invalid
from flowkit.runs.folder import open_new


def data_fingerprint(path: Path) -> dict[str, Any]:
    """Size and sha256 of the data file: a resume must read the rows the run read."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def prior_fingerprint(run_dir: Path) -> dict[str, Any]:
    """What ``${run.outputs.x}`` read of an earlier run: its rows are this run's data too, so a
    resume must read the same (an app run again into that folder would mix two versions)."""
    files = ["outputs.jsonl", "inputs.jsonl", str(FOREIGN_OUTPUTS)]
    return {f: data_fingerprint(run_dir / f) for f in files if (run_dir / f).is_file()}


@dataclass(slots=True)
class _Row:
    inputs: dict[str, Any] | None
    invalid: bool
    top_nodes: int = 0
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Trace records (qualified node name → record) of the nodes the aggregates read."""


def prepare(run_dir: Path, flow: BoundFlow, executor: Executor, *, keep: bool = True) -> set[int]:
    """Keep the finished rows of ``run_dir``: rewrite its files to them, feed their values to
    the executor's aggregates and their counts to its stats; return the kept lines. Without
    ``keep`` (a resume with changes allowed) no row is kept: every row runs again."""
    outputs, traces = run_dir / "outputs.jsonl", run_dir / "traces.jsonl"
    top = set(flow.row_order)
    needed, sub_paths = _needed(executor.aggregates)
    wants_inputs = any(
        r.source == "inputs" for agg in executor.aggregates if not agg.path for r in agg.row_refs
    )
    rows: dict[int, _Row] = {}
    for _, rec in _records(outputs):
        # A record that is not what flowkit writes is not kept: its row runs again.
        outs = rec.get("outputs") or {}
        if rec.get("status") == OK and isinstance(rec.get("line"), int) and isinstance(outs, dict):
            inputs = rec.get("inputs") if wants_inputs else None
            rows[rec["line"]] = _Row(inputs, has_invalid(outs))
    for _, rec in _records(traces):
        line = rec.get("line")
        row = rows.get(line) if isinstance(line, int) else None
        if row is None:
            continue
        node = rec.get("node", "")
        output = rec.get("output")
        if rec.get("kind") == "flow" and isinstance(output, dict) and has_invalid(output):
            row.invalid = True  # a suite's judge that could not be read
        if node in top:
            row.top_nodes += 1
        if node in needed or node in sub_paths:
            row.records[node] = rec
    kept = {line for line, row in rows.items() if keep and row.top_nodes == len(top)}

    _rewrite(outputs, kept, sort=True)
    stats = executor.stats
    _rewrite(traces, kept, sort=False, each=lambda rec: _count(stats, rec))
    for line in sorted(kept):
        row = rows.pop(line)
        stats.rows += 1
        stats.succeeded += 1
        stats.invalid += row.invalid
        scope = _scope(flow, row)
        for agg in executor.aggregates:
            collect(agg, scope, line)
    return kept


def _needed(aggregates: list[AggTask]) -> tuple[set[str], set[str]]:
    """Qualified names of the nodes the aggregates read, and of the sub-flow nodes on the way."""
    needed: set[str] = set()
    paths: set[str] = set()
    for agg in aggregates:
        for i in range(1, len(agg.path) + 1):
            paths.add(".".join(agg.path[:i]))
        for ref in agg.row_refs:
            if ref.source == "node":
                needed.add(".".join((*agg.path, ref.name)))
    return needed, paths


def _scope(flow: BoundFlow, row: _Row) -> Scope:
    """The row's scope tree as the executor built it, holding only what aggregates read."""
    root = Scope(row.inputs or {})
    # Parents before children: a sub-flow's scope exists once its node's record is placed.
    for qual in sorted(row.records, key=lambda q: q.count(".")):
        rec = row.records[qual]
        *parents, name = qual.split(".")
        scope, owner = root, flow
        for step in parents:
            child = scope.children.get(step)
            if child is None:
                break
            sub = owner.nodes[step].sub
            if sub is None:
                break
            scope, owner = child, sub
        else:
            scope.status[name] = rec.get("status", "")
            scope.values[name] = rec.get("output")
            node = owner.nodes.get(name)
            if node is not None and node.sub is not None and rec.get("status") == OK:
                sub = node.sub
                inputs = {n: s.default for n, s in sub.inputs.items() if not s.required}
                inputs.update(rec.get("inputs") or {})
                scope.children[name] = Scope(inputs)
    return root


def _count(stats: Stats, rec: dict[str, Any]) -> None:
    """A kept node record's share of the run's counts and tokens, as the executor counts it."""
    if rec.get("cache_hit"):
        stats.cache_hits += 1
        return
    if rec.get("status") != OK or rec.get("kind") == "flow":
        return
    stats.node_runs += 1
    llm = rec.get("llm") or {}
    if llm.get("usage"):
        stats.add_usage(rec["node"], llm["usage"], llm.get("model"))


def _records(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    if not path.is_file():
        return
    with open(path, "rb") as f:
        for raw, rec in raw_records(f):
            if isinstance(rec, dict):
                yield raw, rec


def _rewrite(
    path: Path,
    kept: set[int],
    *,
    sort: bool,
    each: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Replace ``path`` with its records of the kept lines, byte for byte.

    outputs.jsonl must come out sorted by line, so the writer can append new rows and merge
    at the end. It normally is already; only an earlier interrupted resume leaves it in two
    sorted parts, and then (only then) the kept lines are sorted in memory.
    """
    tmp = path.with_suffix(".jsonl.tmp")
    last, unsorted = -1, False
    tmp.unlink(missing_ok=True)  # a link planted there is removed, never written through
    with open_new(tmp) as f:
        for raw, rec in _records(path):
            line = rec.get("line")
            if line not in kept:
                continue
            unsorted = unsorted or line < last
            last = line
            if each is not None:
                each(rec)
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    if sort and unsorted:
        lines = sorted(_records(tmp), key=lambda item: item[1]["line"])
        with open_new(tmp) as f:
            f.writelines(raw for raw, _ in lines)
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
