"""Intervals for the metrics of metrics.json that `compare` sets side by side, each metric's
verdict from its interval, and why a metric has neither.

A metric of metrics.json is one number per run; whether its change is beyond noise depends on
what it was computed from, which the runs' files tell only sometimes. By the metric's kind:

- a mean (its name's last part is ``mean`` or ``average``) that equals, in both runs, the mean
  of one per-row output's values in outputs.jsonl is that output's mean. When every row with a
  value is paired, its interval is the output's paired one (the difference is the same number);
  otherwise each run's values are resampled apart (a bootstrap of the difference of two
  independent means: wider, as unpaired rows are). Else ``P.mean`` beside ``P.stdev`` and
  ``P.count`` in both runs' metrics.json (the built-in flows write them): the normal interval
  of a difference of two independent means, from those;
- a rate (its name's last part ends in ``rate``, as ``pass_rate``, ``defect_rate@high``), and
  any other metric that is the mean of a per-row 0/1 output: flowkit.inspect.compare_rates;
- a count or a sum (``count``, ``invalid``, ``tokens.sum``) follows how many rows there were,
  and a metric of another kind (a percentile, a maximum, a spread) has no interval the runs'
  files give; nor has a metric missing or without a value in one run.

Each interval gives the verdict :func:`flowkit.inspect.intervals.verdict` gives it (``--fail-if``
and ``--gate-drop`` read the same); without an interval the verdict is :data:`NO_VERDICT`, and
``interval`` says why.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from flowkit.inspect.compare_rates import rate_interval
from flowkit.inspect.compare_rows import Evidence, Side, is_number, paired_diffs
from flowkit.inspect.intervals import (
    Interval,
    bootstrap_ci,
    bootstrap_unpaired,
    fewest_rows,
    lower_is_better,
    verdict,
)

_MEAN = re.compile(r"(?:^|[/._])(?:mean|average)$")  # t.mean, f1_mean, agent/…/average
_RATE = re.compile(r"rate(?:@[^/.]*)?$")  # of the last part: pass_rate, defect_rate@high
_COUNTED = frozenset(("count", "sum", "total", "invalid", "passed", "failed", "errors", "rows"))
PAIRED = "paired bootstrap of the per-row output {name}, whose mean it is"
UNPAIRED = (
    "bootstrap of each run's {name} values apart (the metric is their mean; not every row is "
    "paired)"
)
STORED = "normal, from each run's {prefix}.stdev and {prefix}.count (runs taken as independent)"
NOT_A_MEAN = (
    "none: only a mean's or a rate's interval can be worked out from the runs' files, and this "
    "is neither (nor the mean of a per-row 0/1 output)"
)
COUNTED = "none: a count or a sum follows how many rows each run had; compare a mean or a rate"
NO_SOURCE = (
    "none: no per-row output has this mean in both runs, and metrics.json stores no "
    "{prefix}.stdev and {prefix}.count for it"
)
NOT_NUMBERS = "none: not a number in both runs"
ONLY_IN = "none: only run {run} has this metric"
NO_VALUE = "none: no value in run {run} (no row gave one)"
NO_VERDICT = "none: no interval"


@dataclass
class AggregateDelta:
    """One number of metrics.json in both runs, and its change."""

    name: str
    a: Any
    b: Any
    delta: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = NO_VERDICT
    """From the interval (flowkit.inspect.intervals.verdict); NO_VERDICT without one."""
    interval: str = ""
    """How the interval was worked out, or why there is none (flowkit.inspect.compare_means)."""
    lower_is_better: bool = False
    source: str | None = None
    """The per-row output (or 0/1 rows) the interval is worked out from, where one is."""
    rows: int | None = None
    """The paired rows behind a paired interval."""


def values(side: Side, name: str) -> array[float]:
    """The output's numbers over the run's rows (rows without one left out)."""
    return array("d", (v for v in side.columns.get(name, ()) if v == v))


def _mean_of(side_a: Side, side_b: Side, a: float, b: float) -> str | None:
    """The per-row output whose mean is ``a`` in run A and ``b`` in run B, if one is."""
    for name in sorted(side_a.names & side_b.names):
        xs, ys = values(side_a, name), values(side_b, name)
        if xs and ys and _close(math.fsum(xs) / len(xs), a) and _close(math.fsum(ys) / len(ys), b):
            return name
    return None


def _close(x: float, y: float) -> bool:
    # Summed in another order (numpy, pandas, a running mean), a mean differs in its last bits.
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def _last_part(name: str) -> str:
    return re.split(r"[/.]", name)[-1]


def interval(
    name: str, ev: Evidence, paired: Mapping[str, tuple[int, float | None, float | None]]
) -> Interval:
    """The interval of metric ``name``'s change from run A to run B, or why there is none.
    ``paired`` holds the compared per-row outputs' (paired rows, interval), reused as is."""
    metrics = ev.metrics
    for run, mine in (("B", metrics[0]), ("A", metrics[1])):
        if name not in mine:
            return Interval(None, None, ONLY_IN.format(run=run))
    a, b = metrics[0].get(name), metrics[1].get(name)
    for run, value in (("A", a), ("B", b)):
        # metrics.json keeps an aggregate's NaN as the string "NaN" (strict JSON).
        if value is None or value == "NaN" or (isinstance(value, float) and value != value):
            return Interval(None, None, NO_VALUE.format(run=run))
    if not (is_number(a) and is_number(b)):
        return Interval(None, None, NOT_NUMBERS)
    last = _last_part(name)
    if last in _COUNTED or last.endswith(("_count", "_sum", "_total")):
        return Interval(None, None, COUNTED)
    ab = (float(a), float(b))
    if _MEAN.search(name):
        return _mean_interval(name, ab, ev, paired)
    # A rate by name, or any metric that is a per-row 0/1 output's mean (an accuracy).
    found = rate_interval(name, ab, ev, binary_only=not _RATE.search(last))
    return found or Interval(None, None, NOT_A_MEAN)


def _mean_interval(
    name: str,
    ab: tuple[float, float],
    ev: Evidence,
    paired: Mapping[str, tuple[int, float | None, float | None]],
) -> Interval:
    metrics, sides, pairs = ev.metrics, ev.sides, ev.pairs
    resamples, seed, confidence = ev.resamples, ev.seed, ev.confidence
    side_a, side_b = sides
    output = _mean_of(side_a, side_b, *ab)
    if output is not None:
        diffs = paired_diffs(side_a.columns[output], side_b.columns[output], pairs)
        fewest = fewest_rows(confidence)
        if diffs is not None and len(diffs) >= fewest:
            _, low, high = paired.get(output, (0, None, None))
            if low is None or high is None:  # the output was not compared (--metric)
                low, high = bootstrap_ci(
                    diffs, resamples=resamples, seed=seed, confidence=confidence
                )
            return Interval(low, high, PAIRED.format(name=output), output, len(diffs))
        xs, ys = values(side_a, output), values(side_b, output)
        if len(xs) >= fewest and len(ys) >= fewest:
            low, high = bootstrap_unpaired(
                xs, ys, resamples=resamples, seed=seed, confidence=confidence
            )
            return Interval(low, high, UNPAIRED.format(name=output), output)
    prefix = re.sub(r"[/._]?(?:mean|average)$", "", name)
    stored = [(m.get(f"{prefix}.stdev"), m.get(f"{prefix}.count")) for m in metrics]
    fewest = fewest_rows(confidence)
    numbers = [
        (float(s), float(c)) for s, c in stored if is_number(s) and is_number(c) and c >= fewest
    ]
    if len(numbers) == 2:
        (sa, na), (sb, nb) = numbers
        spread = math.sqrt(sa * sa / na + sb * sb / nb)
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        delta = ab[1] - ab[0]
        return Interval(delta - z * spread, delta + z * spread, STORED.format(prefix=prefix))
    return Interval(None, None, NO_SOURCE.format(prefix=prefix))


def side_by_side(
    ev: Evidence, compared: Sequence[Any], *, lower: Collection[str] = ()
) -> list[AggregateDelta]:
    """metrics.json side by side, each number's change with its interval and verdict where the
    runs' files allow one; ``compared`` are the per-row outputs' ``MetricDelta``. A metric is
    better lower when ``lower`` names it (--lower-is-better), when it is a defect or invalid
    rate, or when it is the mean of an output that is."""
    ma, mb = ev.metrics
    paired = {m.name: (m.n, m.ci_low, m.ci_high) for m in compared}
    lower_outputs = {m.name for m in compared if m.lower_is_better}
    out = []
    for name in dict.fromkeys([*ma, *mb]):
        va, vb = ma.get(name), mb.get(name)
        delta = None
        if is_number(va) and is_number(vb):
            # Two aggregates of the same values summed in another order differ in the last bits.
            delta = 0.0 if math.isclose(va, vb, rel_tol=1e-12, abs_tol=0) else vb - va
        found = interval(name, ev, paired)
        down = lower_is_better(name, lower) or found.output in lower_outputs
        said = NO_VERDICT
        if found.low is not None and found.high is not None:
            said = verdict(found.low, found.high, down)
        found_at = (found.low, found.high, said, found.how, down, found.output, found.rows)
        out.append(AggregateDelta(name, va, vb, delta, *found_at))
    return out
