"""Regression gates: `--gate-drop 'groundedness.mean>0.1'` (run, against `--baseline RUN`) and
`--fail-if` (compare) fail a CI job when a metric got worse than a baseline.

A gate reads ``METRIC>MARGIN`` (fails when the metric drops by more than MARGIN, a number or a
percent of the baseline's value) or ``METRIC`` alone (fails when the comparison's verdict on it is
"worse": its interval lies wholly on the worse side of zero). METRIC is a metric of metrics.json
or a numeric per-row output. The interval, the direction and the verdict are those `compare`
prints and ``RunComparison.to_pandas()`` gives (flowkit.inspect.compare_means works them out for
both), so every verdict is printed with the interval behind it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.inspect.compare import Comparison, MetricDelta
from flowkit.inspect.compare_means import AggregateDelta, interval
from flowkit.inspect.compare_rows import Evidence, Side, is_number, pair_rows, read_side
from flowkit.inspect.gates import Outcome
from flowkit.inspect.intervals import TOO_FEW, WORSE, Interval
from flowkit.runs.folder import COMPLETED, effective_status, read_metrics, read_run_info

_DROP = re.compile(r"^\s*(?P<name>[^<>=!\s]+)\s*(?:>\s*(?P<margin>[^%\s]+)\s*(?P<pct>%)?)?\s*$")


@dataclass(frozen=True)
class DropGate:
    metric: str
    margin: float | None
    """None: the paired interval alone decides."""
    relative: bool = False
    """The margin is a percent of the baseline's value."""

    def __str__(self) -> str:
        if self.margin is None:
            return self.metric
        return f"{self.metric}>{self.margin:g}{'%' if self.relative else ''}"


def parse_drop(text: str, option: str = "--gate-drop") -> DropGate:
    m = _DROP.match(text)
    margin: float | None = None
    if m and m["margin"] is not None:
        try:
            margin = float(m["margin"])
        except ValueError:
            m = None
        else:
            if not math.isfinite(margin) or margin < 0:
                m = None
    if m is None:
        raise UsageError(
            f"{option} {text!r} must read METRIC>MARGIN or METRIC, e.g. 'groundedness.mean>0.1'",
            hint="METRIC>MARGIN fails when METRIC drops by more than MARGIN (a number ≥ 0, or a "
            "percent of the baseline such as 5%); METRIC alone fails when the paired interval "
            "says it dropped",
        )
    from flowkit.inspect.gates import reported_name

    return DropGate(reported_name(m["name"]), margin, m["pct"] is not None)


@dataclass
class Baseline:
    """What a baseline run offers gates: its metrics.json and its numeric per-row outputs."""

    run_dir: Path
    metrics: dict[str, Any]
    side: Side

    @classmethod
    def read(cls, run_dir: Path) -> Baseline:
        return cls(run_dir, read_metrics(run_dir), read_side(run_dir, None))

    def self_interval(self, metric: str) -> Interval:
        """The metric's interval with the baseline on both sides: whether, and from what, the
        comparison will work one out (flowkit.inspect.compare_means decides for both)."""
        pairs = pair_rows(self.side, self.side, None)
        both = Evidence((self.metrics, self.metrics), (self.side, self.side), pairs, 1, 0, 0.95)
        return interval(metric, both, {})

    def interval_source(self, metric: str) -> str | None:
        """The per-row output whose interval a metric shares: itself, or for a mean in
        metrics.json the output whose mean it is."""
        if metric in self.side.columns:
            return metric
        output = self.self_interval(metric).output
        return output if output in self.side.columns else None

    def check(self, gates: Iterable[DropGate], option: str) -> None:
        """Refuse, before any row runs, a gate the baseline cannot answer."""
        known = {n for n, v in self.metrics.items() if is_number(v)} | set(self.side.columns)
        for gate in gates:
            if gate.metric not in known:
                raise UsageError(
                    f"{option} {gate}: baseline {self.run_dir.name} has no numeric metric or "
                    f"per-row output {gate.metric!r}{did_you_mean(gate.metric, known)}",
                    hint=f"it has {one_of(known)}",
                )
            if gate.margin is not None or gate.metric in self.side.columns:
                continue
            found = self.self_interval(gate.metric)
            if found.low is None:
                outputs = sorted(self.side.columns)
                raise UsageError(
                    f"{option} {gate}: {gate.metric!r} has no interval to judge it by: "
                    f"{found.how.removeprefix('none: ')}; give a margin ('{gate.metric}>0.1') "
                    "or gate a per-row output",
                    hint=f"per-row outputs: {one_of(outputs)}",
                )

    def check_lower(self, names: Iterable[str], option: str = "--lower-is-better") -> None:
        """A misspelt --lower-is-better would silently gate the other direction: refuse it."""
        known = {n for n, v in self.metrics.items() if is_number(v)} | set(self.side.columns)
        for name in names:
            if name not in known:
                raise UsageError(
                    f"{option} {name!r}: baseline {self.run_dir.name} has no numeric metric or "
                    f"per-row output of that name{did_you_mean(name, known)}",
                    hint=f"it has {one_of(known)}",
                )


def require_complete(run_dir: Path, option: str) -> None:
    """A gate against a run that did not finish reads metrics of some rows only (a cancelled
    baseline job's, say), and would pass or fail a change on them: refuse it before any row."""
    info = read_run_info(run_dir)
    status = effective_status(info)
    if status == COMPLETED:
        return
    counts = info.get("counts")
    done = counts.get("rows") if isinstance(counts, dict) else None
    rows = f" after {done} rows" if isinstance(done, int) else ""
    raise UsageError(
        f"{option}: run {run_dir.name} is {status}{rows}, not completed: its metrics cover only "
        "the rows it finished",
        hint=f"finish it with `flowkit run --resume {run_dir.name}`, or gate against a completed "
        "run",
    )


def needed_outputs(gates: Iterable[DropGate], baseline: Baseline) -> list[str]:
    """The per-row outputs whose intervals the gates print."""
    found = (baseline.interval_source(g.metric) for g in gates)
    return list(dict.fromkeys(n for n in found if n is not None))


def judge(
    gates: Iterable[DropGate],
    cmp: Comparison,
    baseline: Baseline,
    current: dict[str, Any],
    lower_is_better: Iterable[str] = (),
    label: str = "gate-drop",
) -> list[Outcome]:
    """Each gate's verdict, naming the metric, the change and the interval behind it. The
    interval, the direction and the verdict are the comparison's own (the `compare` table's
    and `to_pandas()`'s); ``lower_is_better`` only turns a metric the comparison lacks."""
    lower = set(lower_is_better)
    per_row = {m.name: m for m in cmp.metrics}
    aggregates = {a.name: a for a in cmp.aggregates}
    out = []
    for g in gates:
        name = f"{label} {g}"
        if g.metric in baseline.side.columns or g.metric not in aggregates:
            entry = _Entry.of_output(per_row.get(g.metric), g.metric in lower)
        else:
            entry = _Entry.of_metric(aggregates[g.metric])
        out.append(_judge(g, entry, name, cmp.confidence))
    return out


@dataclass(frozen=True)
class _Entry:
    """What a gate reads of one row of the comparison."""

    a: Any
    b: Any
    low: float | None
    high: float | None
    verdict: str
    lower: bool
    behind: str
    """The interval's source, as the message says it."""
    no_interval: str

    @classmethod
    def of_output(cls, m: MetricDelta | None, lower: bool) -> _Entry:
        if m is None:
            no = "too few paired rows for an interval"
            return cls(None, None, None, None, TOO_FEW, lower, "", no)
        behind = f" over {m.n} paired rows"
        return cls(
            m.mean_a, m.mean_b, m.ci_low, m.ci_high, m.verdict, m.lower_is_better, behind,
            "too few paired rows for an interval",
        )  # fmt: skip

    @classmethod
    def of_metric(cls, agg: AggregateDelta) -> _Entry:
        if agg.rows is not None:
            source = agg.source if agg.source and " " in agg.source else repr(agg.source)
            behind = f" over {agg.rows} paired rows (from per-row {source})"
        else:
            behind = f", {agg.interval}"
        why = "no interval: " + agg.interval.removeprefix("none: ")
        return cls(
            agg.a, agg.b, agg.ci_low, agg.ci_high, agg.verdict, agg.lower_is_better, behind, why
        )


def _judge(gate: DropGate, e: _Entry, name: str, confidence: float) -> Outcome:
    a, b = e.a, e.b
    if not is_number(a) or not is_number(b):
        return Outcome(name, False, f"{name}: failed, this run has no value of {gate.metric!r}")
    worse = (b - a) if e.lower else (a - b)
    moved = "rose" if e.lower else "dropped"
    change = f"{gate.metric} {a:.4g} → {b:.4g}"
    interval = ""
    if e.low is not None and e.high is not None:
        pct = f"{confidence:.0%}"
        interval = f"; {pct} CI of the change [{e.low:+.4g}, {e.high:+.4g}]{e.behind}"
    if gate.margin is None:
        if e.low is None:
            return Outcome(name, False, f"{name}: failed, {e.no_interval}")
        if e.verdict == WORSE:
            return Outcome(
                name, False, f"{name}: failed, {moved} by {worse:.4g} ({change}){interval}"
            )
        return Outcome(name, True, f"{name}: passed ({change}){interval}")
    limit = gate.margin * abs(a) / 100 if gate.relative else gate.margin
    if worse > limit:
        detail = f"{moved} by {worse:.4g}, more than {limit:.4g} ({change}){interval}"
        return Outcome(name, False, f"{name}: failed, {detail}")
    return Outcome(name, True, f"{name}: passed ({change}){interval}")
