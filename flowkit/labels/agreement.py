"""Agreement between a judge and people: the few formulas, on numpy.

Each function is the textbook formula, checked in tests/labels/test_agreement.py against the
package people already trust on the same labels, to 1e-9: ``cohen_kappa`` against scikit-learn's
``cohen_kappa_score`` (``weights="quadratic"`` too), ``confusion`` against ``confusion_matrix``,
``spearman``/``kendall`` against scipy's ``spearmanr``/``kendalltau`` (tau-b) and
``krippendorff_alpha`` against the ``krippendorff`` package. Written here rather than imported so
``flowkit agree`` needs numpy only (the ``flowkit[stats]`` extra), not scipy and scikit-learn.

Intervals: Wilson's for rates, Fisher's z for the rank correlations (the Fieller–Hartley–Pearson
variances 1.06/(n−3) and 0.437/(n−4)), a t-free normal one for the mean absolute error, and a
seeded percentile bootstrap over rows (or units, for α) for the κs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from flowkit.labels.estimates import Z95

BOOTSTRAP = 1000
"""Resamples behind a bootstrap interval; seeded, so the same labels give the same interval."""

Interval = tuple[float, float]


def confusion(human: ArrayLike, judge: ArrayLike, levels: Sequence[float]) -> NDArray[np.int64]:
    """Counts: row = the people's label, column = the judge's, in ``levels`` order (sorted)."""
    grid = np.asarray(levels, float)
    out = np.zeros((len(grid), len(grid)), dtype=np.int64)
    rows = np.searchsorted(grid, np.asarray(human, float))
    columns = np.searchsorted(grid, np.asarray(judge, float))
    np.add.at(out, (rows, columns), 1)
    return out


def cohen_kappa(human: ArrayLike, judge: ArrayLike, *, quadratic: bool = False) -> float:
    """Cohen's κ; ``quadratic`` weighs a disagreement by the squared distance of the values."""
    h, j = np.asarray(human, float), np.asarray(judge, float)
    levels = np.unique(np.concatenate([h, j]))
    observed = confusion(h, j, list(levels)).astype(float)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    distance = levels[:, None] - levels[None, :]
    weights = distance**2 if quadratic else (distance != 0).astype(float)
    denominator = (weights * expected).sum()
    if denominator == 0:  # one value everywhere: agreement beyond chance is undefined
        return float("nan")
    return float(1 - (weights * observed).sum() / denominator)


def _ranks(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Ranks from 1, ties sharing their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def pearson(a: ArrayLike, b: ArrayLike) -> float:
    x, y = np.asarray(a, float), np.asarray(b, float)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator else float("nan")


def spearman(human: ArrayLike, judge: ArrayLike) -> float:
    return pearson(_ranks(np.asarray(human, float)), _ranks(np.asarray(judge, float)))


def kendall(human: ArrayLike, judge: ArrayLike) -> float:
    """Kendall's τ-b (ties counted on both sides), over all pairs."""
    h, j = np.asarray(human, float), np.asarray(judge, float)
    dh = np.sign(h[:, None] - h[None, :])
    dj = np.sign(j[:, None] - j[None, :])
    upper = np.triu_indices(len(h), k=1)
    dh, dj = dh[upper], dj[upper]
    denominator = np.sqrt((dh != 0).sum() * (dj != 0).sum())
    return float((dh * dj).sum() / denominator) if denominator else float("nan")


def fisher_interval(r: float, n: int, scale: float, lost: int) -> Interval:
    """A rank correlation's interval through Fisher's z, whose variance is scale / (n − lost)."""
    if not np.isfinite(r) or n <= lost or abs(r) >= 1:
        return (float("nan"), float("nan"))
    z, se = np.arctanh(r), np.sqrt(scale / (n - lost))
    return (float(np.tanh(z - Z95 * se)), float(np.tanh(z + Z95 * se)))


def wilson(successes: int, n: int) -> Interval:
    """Wilson's score interval for a proportion."""
    if n == 0:
        return (float("nan"), float("nan"))
    p, z2 = successes / n, Z95**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (float(centre - half), float(centre + half))


def mean_interval(values: ArrayLike) -> Interval:
    v = np.asarray(values, float)
    half = Z95 * v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
    return (float(v.mean() - half), float(v.mean() + half))


def bootstrap(statistic: Callable[[NDArray[np.intp]], float], n: int, seed: int = 0) -> Interval:
    """Percentile interval of ``statistic(rows)`` over resamples of ``range(n)``; resamples
    where it is undefined (one value everywhere) are left out."""
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(rng.integers(0, n, n)) for _ in range(BOOTSTRAP)])
    draws = draws[np.isfinite(draws)]
    if len(draws) < BOOTSTRAP // 2:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return (float(lo), float(hi))


def krippendorff_alpha(reliability: ArrayLike, level: str = "ordinal") -> float:
    """Krippendorff's α over a coders × units matrix (NaN: no label), ``level`` nominal,
    ordinal or interval, from the coincidence matrix (Krippendorff 2011)."""
    data = np.asarray(reliability, float)
    values = np.unique(data[np.isfinite(data)])
    k = len(values)
    counts = (data[:, :, None] == values[None, None, :]).sum(0).astype(float)  # units × values
    pairable = counts.sum(1)
    counts = counts[pairable >= 2]
    weights = 1 / (counts.sum(1) - 1)
    coincidence = np.einsum("u,ui,uj->ij", weights, counts, counts) - np.diag(weights @ counts)
    marginals = coincidence.sum(0)
    total = marginals.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    elif level == "interval":
        delta = (values[:, None] - values[None, :]) ** 2
    elif level == "ordinal":
        cumulative = np.concatenate([[0.0], np.cumsum(marginals)])
        i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        between = cumulative[hi + 1] - cumulative[lo]
        delta = (between - (marginals[i] + marginals[j]) / 2) ** 2
    else:
        raise ValueError(f"unknown level {level!r}: nominal, ordinal or interval")
    observed = (coincidence * delta).sum()
    expected = (np.outer(marginals, marginals) * delta).sum() / (total - 1)
    return float(1 - observed / expected) if expected else float("nan")
