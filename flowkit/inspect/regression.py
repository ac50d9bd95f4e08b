"""Regression gates: `--gate-drop 'groundedness.mean>0.1'` (run, against `--baseline RUN`) and
`--fail-if` (compare) fail a CI job when a metric got worse than a baseline.

A gate reads ``METRIC>MARGIN`` (fails when the metric drops by more than MARGIN, a number or a
percent of the baseline's value) or ``METRIC`` alone (fails when the paired bootstrap interval of
the change lies wholly on the worse side of zero). METRIC is a metric of metrics.json or a
numeric per-row output; a ``….mean`` metric takes its interval from the per-row output it is the
mean of, so every verdict is printed with the interval behind it.
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
from flowkit.inspect.compare_rows import Side, is_number, read_side
from flowkit.runs.folder import read_metrics

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


@dataclass(frozen=True)
class Outcome:
    """One check that decides a CI job's exit code: a gate, the failed rows, an export."""

    name: str
    passed: bool
    message: str
    shown: bool = True
    """Printed at the end of a run (a check that found nothing to say is only recorded)."""


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
    return DropGate(m["name"], margin, m["pct"] is not None)


@dataclass
class Baseline:
    """What a baseline run offers gates: its metrics.json and its numeric per-row outputs."""

    run_dir: Path
    metrics: dict[str, Any]
    side: Side

    @classmethod
    def read(cls, run_dir: Path) -> Baseline:
        return cls(run_dir, read_metrics(run_dir), read_side(run_dir, None))

    def interval_source(self, metric: str) -> str | None:
        """The per-row output whose interval a metric shares: itself, or for a mean in
        metrics.json the output whose mean it is (its own prefix's first)."""
        if metric in self.side.columns:
            return metric
        value = self.metrics.get(metric)
        if not is_number(value) or not metric.endswith("mean"):
            return None
        prefix = metric.rpartition(".")[0]
        names = sorted(self.side.columns, key=lambda n: (not n.startswith(f"{prefix}."), n))
        for name in names:
            column = [v for v in self.side.columns[name] if v == v]
            if column and math.isclose(math.fsum(column) / len(column), value, rel_tol=1e-9):
                return name
        return None

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
            if gate.margin is None and self.interval_source(gate.metric) is None:
                outputs = sorted(self.side.columns)
                raise UsageError(
                    f"{option} {gate}: {gate.metric!r} is not the mean of a per-row output, so "
                    f"it has no paired interval; give a margin ('{gate.metric}>0.1') or gate a "
                    f"per-row output",
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
    """Each gate's verdict, naming the metric, the change and the interval behind it."""
    lower = set(lower_is_better)
    deltas = {m.name: m for m in cmp.metrics}
    return [
        _judge(g, deltas, baseline, current, g.metric in lower, f"{label} {g}", cmp.confidence)
        for g in gates
    ]


def _judge(
    gate: DropGate,
    deltas: dict[str, MetricDelta],
    baseline: Baseline,
    current: dict[str, Any],
    lower: bool,
    name: str,
    confidence: float,
) -> Outcome:
    source = baseline.interval_source(gate.metric)
    paired = deltas.get(source) if source else None
    if gate.metric in baseline.side.columns:
        a = paired.mean_a if paired else None
        b = paired.mean_b if paired else None
    else:
        a, b = baseline.metrics.get(gate.metric), current.get(gate.metric)
    if not is_number(a) or not is_number(b):
        return Outcome(name, False, f"{name}: failed, this run has no value of {gate.metric!r}")
    worse = (b - a) if lower else (a - b)
    moved = "rose" if lower else "dropped"
    change = f"{gate.metric} {a:.4g} → {b:.4g}"
    interval = ""
    says_worse = False
    if paired is not None and paired.ci_low is not None and paired.ci_high is not None:
        pct = f"{confidence:.0%}"
        via = "" if source == gate.metric else f" (from per-row {source!r})"
        interval = (
            f"; {pct} CI of the change [{paired.ci_low:+.4g}, {paired.ci_high:+.4g}] over "
            f"{paired.n} paired rows{via}"
        )
        says_worse = paired.ci_low > 0 if lower else paired.ci_high < 0
    if gate.margin is None:
        if paired is None or paired.ci_low is None:
            return Outcome(name, False, f"{name}: failed, too few paired rows for an interval")
        if says_worse:
            return Outcome(
                name, False, f"{name}: failed, {moved} by {worse:.4g} ({change}){interval}"
            )
        return Outcome(name, True, f"{name}: passed ({change}){interval}")
    limit = gate.margin * abs(a) / 100 if gate.relative else gate.margin
    if worse > limit:
        detail = f"{moved} by {worse:.4g}, more than {limit:.4g} ({change}){interval}"
        return Outcome(name, False, f"{name}: failed, {detail}")
    return Outcome(name, True, f"{name}: passed ({change}){interval}")
