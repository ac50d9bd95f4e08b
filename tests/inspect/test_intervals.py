"""The intervals `compare` puts on a change, checked against independent computations."""

from __future__ import annotations

import pytest
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from flowkit.inspect.intervals import BETTER, SAME, WORSE, fewest_rows, newcombe, verdict, wilson


@pytest.mark.parametrize(
    ("a", "b"),
    [((48, 80), (56, 70)), ((0, 10), (0, 20)), ((3, 3), (1, 7)), ((5, 1000), (17, 998))],
)
def test_newcombe_is_statsmodels_newcomb(a: tuple[int, int], b: tuple[int, int]) -> None:
    # statsmodels' diff is p1 − p2: the first proportion is run B's.
    for confidence in (0.95, 0.9):
        expected = confint_proportions_2indep(
            b[0], b[1], a[0], a[1], method="newcomb", compare="diff", alpha=1 - confidence
        )
        assert newcombe(*a, *b, confidence) == pytest.approx(expected, abs=1e-12)


def test_newcombe_gives_the_published_worked_example() -> None:
    """Newcombe (1998), Statistics in Medicine 17:873-890, Table II: 56/70 − 48/80, method 10,
    0.0524 to 0.3339."""
    low, high = newcombe(48, 80, 56, 70, 0.95)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)


def test_wilson_is_statsmodels_wilson() -> None:
    for hits, n in ((0, 5), (3, 7), (7, 7), (120, 400)):
        assert wilson(hits, n, 1.959963984540054) == pytest.approx(
            proportion_confint(hits, n, alpha=0.05, method="wilson"), abs=1e-12
        )


def test_a_verdict_leaves_zero_out_on_its_side() -> None:
    assert verdict(0.1, 0.2, False) == BETTER
    assert verdict(0.1, 0.2, True) == WORSE
    assert verdict(-0.2, -0.1, True) == BETTER
    assert verdict(-0.2, 0.0, False) == SAME


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99, 0.999])
def test_fewest_rows_is_where_scipys_sign_test_first_calls_a_unanimous_change_real(
    confidence: float,
) -> None:
    stats = pytest.importorskip("scipy.stats")
    n = fewest_rows(confidence)
    assert stats.binomtest(n, n, 0.5).pvalue <= 1 - confidence
    if n > 2:
        assert stats.binomtest(n - 1, n - 1, 0.5).pvalue > 1 - confidence
