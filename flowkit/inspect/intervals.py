"""The intervals `compare` puts on a change from run A to run B, and the one rule that turns an
interval into a verdict (the table, `to_pandas()`, `--fail-if` and `--gate-drop` all call
:func:`verdict`).

- :func:`bootstrap_ci`: a percentile bootstrap of the mean of paired differences (B − A per row);
  a rate's rows are 0/1, so a paired rate gets the same interval as a paired mean.
- :func:`bootstrap_unpaired`: each run's values resampled apart, where not every row is paired.
- :func:`newcombe`: a difference of two independent proportions, Newcombe's hybrid score
  interval (his method 10; built from two Wilson intervals): sound at rates near 0 or 1 and at
  a handful of rows, where the normal approximation is not.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from statistics import NormalDist

BETTER, WORSE, SAME, TOO_FEW = "better", "worse", "no significant change", "too few rows"

_LOWER_BY_NAME = re.compile(r"(?:^|[/.])(?:defect_rate(?:@[^/.]*)?|invalid_rate)$")
"""Metrics better lower whatever the flag says: a rise in defects or unreadable answers is
never an improvement."""


def lower_is_better(name: str, asked: Collection[str] = ()) -> bool:
    """Whether a fall of ``name`` is the improvement: named by ``--lower-is-better``, or a
    defect rate or ``invalid_rate`` (see :data:`_LOWER_BY_NAME`)."""
    return name in asked or _LOWER_BY_NAME.search(name) is not None


def fewest_rows(confidence: float) -> int:
    """The fewest rows (paired, or on each side) an interval is drawn from: with fewer, even
    every row changing the same way is within chance at ``confidence`` (a two-sided sign test:
    ``2 * 0.5**n``), yet a percentile bootstrap of them would call the change certain."""
    return max(2, math.ceil(math.log2(2.0 / (1.0 - confidence)) - 1e-9))


def verdict(low: float, high: float, lower: bool) -> str:
    """The verdict of a change whose interval is [low, high]: beyond noise only when the
    interval leaves zero out."""
    if low <= 0.0 <= high:
        return SAME
    higher = low > 0.0
    return BETTER if higher != lower else WORSE


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_ci(
    diffs: Sequence[float], *, resamples: int, seed: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the mean of ``diffs`` over ``resamples`` resamples."""
    n = len(diffs)
    if n == 0:
        raise ValueError("no differences to resample")
    if min(diffs) == max(diffs):  # every resample has the same mean
        return diffs[0], diffs[0]
    rng = random.Random(seed)
    choices = rng.choices
    means = sorted(sum(choices(diffs, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2
    return quantile(means, alpha), quantile(means, 1.0 - alpha)


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


def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion (no continuity correction)."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(
    successes_a: int, n_a: int, successes_b: int, n_b: int, confidence: float
) -> tuple[float, float]:
    """Interval of p_B − p_A for two independent proportions (Newcombe 1998, method 10)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    pa, pb = successes_a / n_a, successes_b / n_b
    la, ua = wilson(successes_a, n_a, z)
    lb, ub = wilson(successes_b, n_b, z)
    delta = pb - pa
    low = delta - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2)
    high = delta + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)
    return low, high


@dataclass(frozen=True)
class Interval:
    """The interval of one metric's change, or why there is none."""

    low: float | None
    high: float | None
    how: str
    """How the interval was worked out, or why there is none."""
    output: str | None = None
    """The per-row output (or labels) the metric is worked out from, where one is."""
    rows: int | None = None
    """The paired rows behind a paired interval."""
