"""`flowkit compare RUN_A RUN_B`: did B score better than A, per row, beyond noise?

Rows are paired (by line, or by a key column of the inputs) so each row is compared with itself:
the paired differences cancel how hard each row is, which makes a small change visible that
two unpaired means would hide. The uncertainty of the mean difference comes from a percentile
bootstrap over the paired differences, in pure Python (`random.choices` on the differences is
the fastest resampling loop the standard library has; about 1 s per metric for 10k rows × 2000
resamples), seeded, so the same command prints the same interval.
"""

from __future__ import annotations

import heapq
import json
import math
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.flow.target import ANSWER_INPUTS, APP_FIELDS
from flowkit.inspect.compare_means import AggregateDelta, side_by_side
from flowkit.inspect.compare_rows import (
    NO_INPUT,
    Evidence,
    Pairs,
    Side,
    is_number,
    pair_rows,
    read_side,
)
from flowkit.inspect.intervals import (
    BETTER,
    SAME,
    TOO_FEW,
    WORSE,
    bootstrap_ci,
    fewest_rows,
    verdict,
)
from flowkit.inspect.intervals import (
    lower_is_better as better_lower,
)
from flowkit.inspect.trace_view import fold, titled
from flowkit.runs.folder import read_metrics, read_run_info

__all__ = ["BETTER", "SAME", "TOO_FEW", "WORSE", "Comparison", "bootstrap_ci", "compare_runs"]


@dataclass
class MetricDelta:
    """One per-row output compared across the paired rows that have a number on both sides."""

    name: str
    n: int
    mean_a: float | None
    mean_b: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    lower_is_better: bool = False
    # Paired rows where this output is missing or not a number on one side (an invalid score).
    missing: int = 0


@dataclass
class RowChange:
    metric: str
    key: Any
    line_a: int
    line_b: int
    a: float
    b: float
    delta: float
    regression: bool


@dataclass
class Comparison:
    run_a: str
    run_b: str
    key: str | None
    rows_a: int
    rows_b: int
    paired: int
    only_a: list[Any]
    only_b: list[Any]
    # Rows left out of the pairing: no key value, or a key value already seen on that side.
    unkeyed: dict[str, int]
    duplicates: dict[str, int]
    metrics: list[MetricDelta]
    changes: list[RowChange]
    aggregates: list[AggregateDelta]
    resamples: int
    seed: int
    confidence: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, default=str)


APP_INPUTS = frozenset((*ANSWER_INPUTS, *APP_FIELDS, "messages"))
"""Metric inputs an app fills (its answer, the context it retrieved, a conversation holding its
replies): an A/B of two app versions changes them, which is the point of comparing."""


def _warnings(
    info: tuple[dict[str, Any], dict[str, Any]], a: Side, b: Side, pairs: Pairs, key: str | None
) -> list[str]:
    """What makes a verdict meaningless: other flows, or paired rows that are not the same."""
    notes = []
    flow_a, flow_b = ((i.get("flow") or {}).get("name") for i in info)
    if flow_a != flow_b:
        notes.append(
            f"warning: the runs are of different flows ({flow_a!r} and {flow_b!r}); outputs of "
            "the same name may not mean the same"
        )
    differ, first = _other_data(info, a, b, pairs, key)
    if differ:
        notes.append(
            f"warning: {differ} of {len(pairs.a)} paired rows have different inputs (first: "
            f"{'line' if isinstance(first, int) else 'key'} {first!r}); the runs may not be over "
            "the same data — pair them with --key INPUT (an input of the flow that names each row)"
        )
    return notes


def _data_inputs(info: dict[str, Any]) -> set[str] | None:
    """The inputs a run read as data: not filled by the app (:data:`APP_INPUTS`), nor mapped
    from anything but the data file or an earlier run's inputs (an earlier run's outputs are
    an app's answers). None where the run does not say how its inputs were mapped."""
    mapping = info.get("mapping")
    if not isinstance(mapping, dict):
        return None
    return {
        name
        for name, source in mapping.items()
        if name not in APP_INPUTS and str(source).startswith(("${data.", "${run.inputs."))
    }


def _other_data(
    info: tuple[dict[str, Any], dict[str, Any]], a: Side, b: Side, pairs: Pairs, key: str | None
) -> tuple[int, Any]:
    """(how many paired rows are of other data, the first one's line or key).

    What the rows *are* decides, never what the app made of them: rows paired by ``--key``
    are the same request by construction; two runs that read the same data file (its sha256 in
    run.json) read the same rows; otherwise a pair is other data when it differs in every input
    that is data and tells rows apart (an input with one value in every row, a threshold, tells
    nothing). Where the data has no such input (only the app's answer and context), nothing
    says the rows differ, so nothing is claimed."""
    if key is not None:
        return 0, None
    prints = [(i.get("invocation") or {}).get("data_fingerprint") for i in info]
    if prints[0] is not None and prints[0] == prints[1]:
        return 0, None
    known = [_data_inputs(i) for i in info]
    data = a.inputs.keys() & b.inputs.keys()
    data = {n for n in data if n not in APP_INPUTS}
    for names in known:
        if names is not None:
            data &= names
    shared = [
        (a.inputs[n], b.inputs[n])
        for n in sorted(data)
        if len({a.inputs[n][pa] for pa in pairs.a} - {NO_INPUT}) > 1
    ]
    differ, first = 0, None
    for i, (pa, pb) in enumerate(zip(pairs.a, pairs.b, strict=True)):
        compared = [(ca[pa], cb[pb]) for ca, cb in shared if NO_INPUT not in (ca[pa], cb[pb])]
        if compared and all(ha != hb for ha, hb in compared):
            differ += 1
            if first is None:
                first = pairs.key(i, a)
    return differ, first


def _check_names(asked: Iterable[str], available: set[str], option: str) -> None:
    for name in asked:
        if name not in available:
            raise UsageError(
                f"{option} {name!r}: no numeric per-row output of that name in both runs"
                f"{did_you_mean(name, available)}",
                hint=f"outputs in both: {one_of(available)}",
            )


def compare_runs(
    run_a: Path,
    run_b: Path,
    *,
    key: str | None = None,
    metrics: Iterable[str] = (),
    lower_is_better: Iterable[str] = (),
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    top: int = 10,
) -> Comparison:
    """Compare run B with run A: per-row outputs paired, with bootstrap intervals and verdicts,
    the rows that changed most, and metrics.json side by side."""
    if resamples < 1:
        raise UsageError("--resamples must be at least 1")
    a, b = read_side(run_a, key), read_side(run_b, key)
    if key is not None and not (a.index or b.index):
        inputs = a.input_names | b.input_names
        raise UsageError(
            f"--key {key!r}: no row of either run has that input{did_you_mean(key, inputs)}",
            hint=f"inputs: {one_of(inputs)}",
        )
    common = a.names & b.names
    asked, lower = list(dict.fromkeys(metrics)), set(lower_is_better)
    _check_names(asked, common, "--metric")
    numbers = (read_metrics(run_a), read_metrics(run_b))
    # A metric of metrics.json (a defect rate, a latency's mean) may be lower-is-better too.
    aggregates = {n for m in numbers for n, v in m.items() if is_number(v)}
    _check_names(sorted(lower - aggregates), common, "--lower-is-better")
    names = asked or sorted(common)
    pairs = pair_rows(a, b, key)
    result = Comparison(
        run_a=run_a.name,
        run_b=run_b.name,
        key=key,
        rows_a=a.count,
        rows_b=b.count,
        paired=len(pairs.a),
        only_a=pairs.only_a,
        only_b=pairs.only_b,
        unkeyed={"a": a.unkeyed, "b": b.unkeyed},
        duplicates={"a": a.duplicates, "b": b.duplicates},
        metrics=[],
        changes=[],
        aggregates=[],
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )
    info = (read_run_info(run_a), read_run_info(run_b))
    result.notes.extend(_warnings(info, a, b, pairs, key))
    if not common:
        result.notes.append("no numeric per-row output is present in both runs")
    for name in names:
        down = better_lower(name, lower)
        result.metrics.append(_metric(name, pairs, a, b, result, lower=down, top=top))
    evidence = Evidence(numbers, (a, b), pairs, resamples, seed, confidence)
    result.aggregates = side_by_side(evidence, result.metrics, lower=lower & aggregates)
    return result


def _metric(
    name: str, pairs: Pairs, a: Side, b: Side, result: Comparison, *, lower: bool, top: int
) -> MetricDelta:
    col_a, col_b = a.columns[name], b.columns[name]
    xs: array[float] = array("d")
    ys: array[float] = array("d")
    diffs: array[float] = array("d")
    # The `top` biggest changes, regressions first, kept in a bounded heap whose root is the
    # least of them: (-regression, |delta|, -i) orders as the listing does, earlier rows first.
    kept: list[tuple[int, float, int]] = []
    for i, (pa, pb) in enumerate(zip(pairs.a, pairs.b, strict=True)):
        x, y = col_a[pa], col_b[pb]
        if x != x or y != y:  # NaN: the output is missing on one side
            continue
        xs.append(x)
        ys.append(y)
        diffs.append(y - x)
        if x != y and top > 0:
            worse = (y > x) if lower else (y < x)
            item = (int(worse), abs(y - x), -i)
            if len(kept) < top:
                heapq.heappush(kept, item)
            elif item > kept[0]:
                heapq.heapreplace(kept, item)
    for _, _, neg_i in sorted(kept, reverse=True):
        i = -neg_i
        pa, pb = pairs.a[i], pairs.b[i]
        x, y = col_a[pa], col_b[pb]
        worse = (y > x) if lower else (y < x)
        k = pairs.key(i, a)
        result.changes.append(RowChange(name, k, a.lines[pa], b.lines[pb], x, y, y - x, worse))
    n = len(xs)
    missing = len(pairs.a) - n
    if n == 0:
        return MetricDelta(name, 0, None, None, None, None, None, TOO_FEW, lower, missing)
    delta = math.fsum(diffs) / n
    mean_a, mean_b = math.fsum(xs) / n, math.fsum(ys) / n
    if n < fewest_rows(result.confidence):
        return MetricDelta(name, n, mean_a, mean_b, delta, None, None, TOO_FEW, lower, missing)
    low, high = bootstrap_ci(
        diffs, resamples=result.resamples, seed=result.seed, confidence=result.confidence
    )
    return MetricDelta(
        name, n, mean_a, mean_b, delta, low, high, verdict(low, high, lower), lower, missing
    )


# -- rendering --------------------------------------------------------------------------------
_VERDICT_STYLE = {BETTER: "bold green", WORSE: "bold red", SAME: "dim", TOO_FEW: "yellow"}


def _f(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def _keys_line(label: str, keys: list[Any], shown: int = 5) -> str:
    head = ", ".join(fold(k, 40) for k in keys[:shown])
    return f"{len(keys)} only in {label}: {head}{', …' if len(keys) > shown else ''}"


def render(cmp: Comparison, run_a: Path, run_b: Path) -> Group:
    """The comparison as rich tables: verdicts, the rows that changed most, metrics.json."""
    parts: list[Any] = []
    head = Table(box=None, show_header=False)
    for label, path, rows in (("A", run_a, cmp.rows_a), ("B", run_b, cmp.rows_b)):
        flow = (read_run_info(path).get("flow") or {}).get("name", "?")
        head.add_row(label, f"{path.name} ({flow}, {rows:,} rows)")
    paired_by = f"key {cmp.key!r}" if cmp.key else "line"
    head.add_row("paired", f"{cmp.paired:,} rows by {paired_by}")
    for label, keys in (("A", cmp.only_a), ("B", cmp.only_b)):
        if keys:
            head.add_row("", Text(_keys_line(label, keys), "yellow"))
    for label, side in (("A", "a"), ("B", "b")):
        if cmp.unkeyed[side] or cmp.duplicates[side]:
            head.add_row(
                "",
                Text(
                    f"{label}: left out, rows without the key {cmp.unkeyed[side]}, "
                    f"rows with a key seen before {cmp.duplicates[side]}",
                    "yellow",
                ),
            )
    for note in cmp.notes:
        head.add_row("note", note)
    parts.append(head)
    if cmp.metrics:
        pct = f"{cmp.confidence:.0%}"
        title = f"per-row outputs (paired bootstrap, {cmp.resamples:,} resamples, seed {cmp.seed})"
        t = titled(title, "output", "rows", "mean A", "mean B", "Δ (B−A)", f"{pct} CI", "verdict")
        for m in cmp.metrics:
            ci = "—" if m.ci_low is None else f"[{m.ci_low:+.4g}, {m.ci_high:+.4g}]"
            name = m.name + (" (lower is better)" if m.lower_is_better else "")
            count = f"{m.n:,}" + (f" ({m.missing} lack a value)" if m.missing else "")
            verdict = Text(m.verdict, _VERDICT_STYLE.get(m.verdict, ""))
            t.add_row(name, count, _f(m.mean_a), _f(m.mean_b), _signed(m.delta), ci, verdict)
        parts.append(t)
    if cmp.changes:
        title = "rows that changed most (regressions first)"
        t = titled(title, "output", cmp.key or "line", "A", "B", "Δ")
        for c in cmp.changes:
            who = (
                fold(c.key, 40)
                if cmp.key is None
                else f"{fold(c.key, 40)} (lines {c.line_a}/{c.line_b})"
            )
            style = "red" if c.regression else "green"
            t.add_row(c.metric, who, _f(c.a), _f(c.b), Text(_signed(c.delta), style))
        parts.append(t)
    if cmp.aggregates:
        t = titled("metrics", "metric", "A", "B", "Δ", f"{cmp.confidence:.0%} CI", "verdict")
        for agg in cmp.aggregates:
            ci = "—" if agg.ci_low is None else f"[{agg.ci_low:+.4g}, {agg.ci_high:+.4g}]"
            said = "—" if agg.ci_low is None else agg.verdict  # why: compare --json, to_pandas
            shown = Text(said, _VERDICT_STYLE.get(said, ""))
            t.add_row(agg.name, _f(agg.a), _f(agg.b), _signed(agg.delta), ci, shown)
        parts.append(t)
    return Group(*parts)
