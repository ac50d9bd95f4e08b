"""Intervals for the metrics of metrics.json that `compare` sets side by side.

A metric of metrics.json is one number per run; whether its change is beyond noise depends on
what it was computed from, which the run's files tell only sometimes:

- a mean (its name's last part is ``mean`` or ``average``) that equals, in both runs, the mean
  of one per-row output's values in outputs.jsonl is that output's mean. When every row with a
  value is paired, its interval is the output's paired one (the difference is the same number);
  otherwise each run's values are resampled apart (a bootstrap of the difference of two
  independent means: wider, as unpaired rows are);
- ``P.mean`` beside ``P.stdev`` and ``P.count`` in both runs' metrics.json (the built-in flows
  write them): the normal interval of a difference of two independent means, from those.

Otherwise there is no interval, and :attr:`MeanInterval.how` says why.
"""

from __future__ import annotations

import math
import random
import re
from array import array
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from flowkit.inspect.compare_rows import Side, is_number

_MEAN = re.compile(r"(?:^|[/._])(?:mean|average)$")  # t.mean, f1_mean, agent/…/average
PAIRED = "paired bootstrap of the per-row output {name}, whose mean it is"
UNPAIRED = (
    "bootstrap of each run's {name} values apart (the metric is their mean; not every row is "
    "paired)"
)
STORED = "normal, from each run's {prefix}.stdev and {prefix}.count (runs taken as independent)"
NOT_A_MEAN = "none: only a mean's interval can be worked out from the runs' files"
NO_SOURCE = (
    "none: no per-row output has this mean in both runs, and metrics.json stores no "
    "{prefix}.stdev and {prefix}.count for it"
)
NOT_NUMBERS = "none: not a number in both runs"


@dataclass
class AggregateDelta:
    """One number of metrics.json in both runs, and its change."""

    name: str
    a: Any
    b: Any
    delta: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    """Where the interval and the direction are known (the mean of a per-row output)."""
    interval: str = ""
    """How the interval was worked out, or why there is none (flowkit.inspect.compare_means)."""


@dataclass(frozen=True)
class MeanInterval:
    low: float | None
    high: float | None
    how: str
    """How the interval was worked out, or why there is none."""
    output: str | None = None
    """The per-row output the metric is the mean of, where one is."""


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


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


def bootstrap_unpaired(
    xs: Sequence[float], ys: Sequence[float], *, resamples: int, seed: int, confidence: float
) -> tuple[float, float]:
    """Percentile interval of mean(ys) − mean(xs), each side resampled on its own."""
    rng = random.Random(seed)
    choices, nx, ny = rng.choices, len(xs), len(ys)
    deltas = sorted(
        sum(choices(ys, k=ny)) / ny - sum(choices(xs, k=nx)) / nx for _ in range(resamples)
    )
    alpha = (1.0 - confidence) / 2
    return quantile(deltas, alpha), quantile(deltas, 1.0 - alpha)


def interval(
    name: str,
    metrics: tuple[Mapping[str, Any], Mapping[str, Any]],
    sides: tuple[Side, Side],
    paired: Mapping[str, tuple[int, float | None, float | None]],
    *,
    resamples: int,
    seed: int,
    confidence: float,
) -> MeanInterval:
    """The interval of metric ``name``'s change from run A to run B, where the runs' files
    allow one. ``paired`` holds each compared per-row output's (paired rows, interval)."""
    a, b = metrics[0].get(name), metrics[1].get(name)
    if not (is_number(a) and is_number(b)):
        return MeanInterval(None, None, NOT_NUMBERS)
    if not _MEAN.search(name):
        return MeanInterval(None, None, NOT_A_MEAN)
    side_a, side_b = sides
    output = _mean_of(side_a, side_b, float(a), float(b))
    if output is not None:
        xs, ys = values(side_a, output), values(side_b, output)
        n, low, high = paired.get(output, (0, None, None))
        if n == len(xs) == len(ys) and low is not None:
            return MeanInterval(low, high, PAIRED.format(name=output), output)
        if len(xs) >= 2 and len(ys) >= 2:
            low, high = bootstrap_unpaired(
                xs, ys, resamples=resamples, seed=seed, confidence=confidence
            )
            return MeanInterval(low, high, UNPAIRED.format(name=output), output)
    prefix = re.sub(r"[/._]?(?:mean|average)$", "", name)
    stored = [(m.get(f"{prefix}.stdev"), m.get(f"{prefix}.count")) for m in metrics]
    numbers = [(float(s), float(c)) for s, c in stored if is_number(s) and is_number(c) and c >= 2]
    if len(numbers) == 2:
        (sa, na), (sb, nb) = numbers
        spread = math.sqrt(sa * sa / na + sb * sb / nb)
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        delta = float(b) - float(a)
        return MeanInterval(delta - z * spread, delta + z * spread, STORED.format(prefix=prefix))
    return MeanInterval(None, None, NO_SOURCE.format(prefix=prefix))


def side_by_side(
    metrics: tuple[Mapping[str, Any], Mapping[str, Any]],
    sides: tuple[Side, Side],
    compared: Sequence[Any],
    *,
    verdict: Callable[[float, float, bool], str],
    lower_is_better: Collection[str] = (),
    resamples: int,
    seed: int,
    confidence: float,
) -> list[AggregateDelta]:
    """metrics.json side by side, each number's change with its interval where the runs' files
    allow one; ``compared`` are the per-row outputs' ``MetricDelta``; a metric named in
    ``lower_is_better`` is better lower, whatever the output it is the mean of."""
    ma, mb = metrics
    paired = {m.name: (m.n, m.ci_low, m.ci_high) for m in compared}
    lower = {m.name: m.lower_is_better for m in compared}
    out = []
    for name in dict.fromkeys([*ma, *mb]):
        va, vb = ma.get(name), mb.get(name)
        delta = None
        if is_number(va) and is_number(vb):
            # Two aggregates of the same values summed in another order differ in the last bits.
            delta = 0.0 if math.isclose(va, vb, rel_tol=1e-12, abs_tol=0) else vb - va
        found = interval(
            name,
            metrics,
            sides,
            paired,
            resamples=resamples,
            seed=seed,
            confidence=confidence,
        )
        said = None
        if found.low is not None and found.high is not None and found.output is not None:
            lower_here = name in lower_is_better or lower.get(found.output, False)
            said = verdict(found.low, found.high, lower_here)
        out.append(AggregateDelta(name, va, vb, delta, found.low, found.high, said, found.how))
    return out
