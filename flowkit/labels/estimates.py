"""Means with 95% intervals from a judge and a labelled subset: judge-only, labels-only and the
prediction-powered PPI++ estimate (Angelopoulos, Duchi & Zrnic, arXiv:2311.01453).

The formulas are the few lines of ``ppi_py.ppi_mean_ci`` with ``lam=None`` (power tuning,
λ clipped to [0, 1]), written here on numpy so ``flowkit[stats]`` stays small: ``ppi_python``
pulls in statsmodels, numba and gdown. tests/labels/test_estimates.py checks every figure
against ``ppi_py`` on the same data to 1e-9.

PPI++ is valid when the labelled rows are a uniform random sample of the run's rows: the judge's
error on them then estimates its error everywhere. Rows without a label are the "unlabelled"
set; every labelled row also has a judge value.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

Z95 = NormalDist().inv_cdf(0.975)


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its two-sided 95% interval; ``n`` rows it rests on."""

    value: float
    lo: float
    hi: float
    n: int

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def as_dict(self) -> dict[str, object]:
        return {"value": self.value, "ci": [self.lo, self.hi], "n": self.n}


def _normal(value: float, se: float, n: int) -> Estimate:
    return Estimate(float(value), float(value - Z95 * se), float(value + Z95 * se), n)


def mean_estimate(values: ArrayLike) -> Estimate:
    """The plain mean with a normal interval (population sd / sqrt(n), as ``ppi_py``'s
    ``classical_mean_ci``): the judge-only or the labels-only figure."""
    y = np.asarray(values, dtype=float)
    return _normal(y.mean(), y.std() / np.sqrt(len(y)), len(y))


def power_tuning(labels: ArrayLike, judged: ArrayLike, unlabelled: ArrayLike) -> float:
    """PPI++'s λ: how much of the judge's view of the unlabelled rows to trust (0: none, the
    labels-only mean; 1: plain PPI). It minimises the estimate's variance."""
    y = np.asarray(labels, dtype=float)
    f = np.asarray(judged, dtype=float)
    fu = np.asarray(unlabelled, dtype=float)
    n, big_n = len(y), len(fu)
    theta = fu.mean() + (y - f).mean()  # the λ = 1 estimate the gradients are taken at
    grads, grads_hat = y - theta, f - theta
    cov = 2 * ((grads - grads.mean()) * (grads_hat - grads_hat.mean())).sum() / n
    var_hat = np.var(np.concatenate([grads_hat, fu - theta]), ddof=1)
    if var_hat == 0:  # a judge that says the same everywhere adds nothing
        return 0.0
    lam = cov / (2 * (1 + n / big_n) * var_hat)
    return float(np.clip(lam, 0.0, 1.0))


def ppi_mean(labels: ArrayLike, judged: ArrayLike, unlabelled: ArrayLike) -> Estimate:
    """The PPI++ mean: λ·(judge's mean over the unlabelled rows) + the labelled rows' mean of
    (label − λ·judge), with its 95% interval. ``labels`` and ``judged`` are the same rows."""
    y = np.asarray(labels, dtype=float)
    f = np.asarray(judged, dtype=float)
    fu = np.asarray(unlabelled, dtype=float)
    n, big_n = len(y), len(fu)
    if n == 0:
        raise ValueError("no labelled rows")
    if big_n == 0 or n < 2:  # every row labelled (or one): the labels say it all
        return mean_estimate(y)
    lam = power_tuning(y, f, fu)
    value = lam * fu.mean() + (y - lam * f).mean()
    se = np.sqrt((lam * fu).std() ** 2 / big_n + (y - lam * f).std() ** 2 / n)
    return _normal(value, se, n + big_n)


def labels_needed(labels: ArrayLike, judged: ArrayLike, unlabelled: ArrayLike, width: float) -> int:
    """How many more labelled rows bring the PPI++ interval to ``width`` (0 when it is already
    there), assuming the spreads seen so far hold: the review page's label budget."""
    y = np.asarray(labels, dtype=float)
    f = np.asarray(judged, dtype=float)
    fu = np.asarray(unlabelled, dtype=float)
    total = len(y) + len(fu)
    if len(y) >= 2 and ppi_mean(y, f, fu).width <= width:
        return 0
    if len(y) < 2:
        raise ValueError("at least two labelled rows are needed to estimate a budget")
    lam = power_tuning(y, f, fu) if len(fu) else 0.0
    rect_var = (y - lam * f).var()
    judge_var = (lam * np.concatenate([f, fu])).var()
    for n in range(len(y), total + 1):
        rest = total - n
        se2 = rect_var / n + (judge_var / rest if rest else 0.0)
        if 2 * Z95 * np.sqrt(se2) <= width:
            return n - len(y)
    return total - len(y)
