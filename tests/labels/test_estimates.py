"""The PPI++ estimate equals the PPI authors' package on the same data (to 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from flowkit.labels.estimates import labels_needed, mean_estimate, power_tuning, ppi_mean

ppi_py = pytest.importorskip("ppi_py")


def _judged(seed: int, rows: int = 1000, labelled: int = 100) -> tuple[np.ndarray, ...]:
    """A judge that reads a 1-5 truth with noise and a bias, and a labelled share."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, rows).astype(float)
    judge = np.clip(np.round(truth + 0.6 + rng.normal(0, 0.8, rows)), 1, 5)
    return truth[:labelled], judge[:labelled], judge[labelled:]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ppi_mean_equals_ppi_py(seed: int) -> None:
    y, f, fu = _judged(seed)
    ours = ppi_mean(y, f, fu)
    lo, hi = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05)
    assert (ours.lo, ours.hi) == pytest.approx((lo[0], hi[0]), abs=1e-9)
    assert ours.value == pytest.approx(ppi_py.ppi_mean_pointestimate(y, f, fu)[0], abs=1e-9)


def test_pass_rates_equal_ppi_py() -> None:
    y, f, fu = _judged(7)
    ours = ppi_mean(y > 3, f > 3, fu > 3)
    lo, hi = ppi_py.ppi_mean_ci(
        (y > 3).astype(float), (f > 3).astype(float), (fu > 3) * 1.0, alpha=0.05
    )
    assert (ours.lo, ours.hi) == pytest.approx((lo[0], hi[0]), abs=1e-9)


def test_the_labels_only_interval_equals_the_classical_one() -> None:
    y, _, _ = _judged(8)
    lo, hi = ppi_py.classical_mean_ci(y, alpha=0.05)
    ours = mean_estimate(y)
    assert (ours.lo, ours.hi) == pytest.approx((lo, hi), abs=1e-9)


def test_a_judge_that_says_nothing_gets_no_weight() -> None:
    y, f, fu = _judged(9)
    assert power_tuning(y, np.full_like(f, 3.0), np.full_like(fu, 3.0)) == 0.0
    assert ppi_mean(y, np.full_like(f, 3.0), np.full_like(fu, 3.0)).value == pytest.approx(y.mean())


def test_the_label_budget_reaches_the_width_it_promises() -> None:
    rng = np.random.default_rng(11)
    truth = rng.integers(1, 6, 2000).astype(float)
    judge = np.clip(np.round(truth + rng.normal(0, 0.7, 2000)), 1, 5)
    now = ppi_mean(truth[:50], judge[:50], judge[50:])
    target = now.width * 0.6
    more = labels_needed(truth[:50], judge[:50], judge[50:], target)
    assert more > 0
    n = 50 + more
    assert ppi_mean(truth[:n], judge[:n], judge[n:]).width <= target * 1.05
    assert (
        ppi_mean(truth[: n - more // 2], judge[: n - more // 2], judge[n - more // 2 :]).width
        > target
    )
    assert labels_needed(truth[:50], judge[:50], judge[50:], now.width * 1.01) == 0
