"""Each agreement figure equals the trusted package's on the same labels (to 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from flowkit.labels import agreement as ag

sklearn_metrics = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")
krippendorff = pytest.importorskip("krippendorff")


def _scores(seed: int, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """People's 1-5 labels and a judge that is off by one on a share of them."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, n).astype(float)
    judge = np.clip(human + rng.choice([-1, 0, 0, 1, 2], n), 1, 5)
    return human, judge


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kappas_equal_scikit_learn(seed: int) -> None:
    human, judge = _scores(seed)
    for quadratic, weights in ((False, None), (True, "quadratic")):
        ours = ag.cohen_kappa(human, judge, quadratic=quadratic)
        theirs = sklearn_metrics.cohen_kappa_score(human, judge, weights=weights)
        assert ours == pytest.approx(theirs, abs=1e-9)
    passed_h, passed_j = human > 3, judge > 3
    assert ag.cohen_kappa(passed_h, passed_j) == pytest.approx(
        sklearn_metrics.cohen_kappa_score(passed_h, passed_j), abs=1e-9
    )


def test_weighted_kappa_with_a_level_nobody_used_weighs_values_not_positions() -> None:
    """Nobody said 2: scikit-learn's default would put 1 and 3 next to each other; given the
    whole scale it agrees with flowkit (docs/judge-vs-people.md says so)."""
    human = np.array([3.0, 3.0, 1.0, 5.0, 1.0, 5.0, 4.0, 3.0])
    judge = np.array([4.0, 4.0, 1.0, 5.0, 1.0, 5.0, 4.0, 3.0])
    theirs = sklearn_metrics.cohen_kappa_score(
        human, judge, weights="quadratic", labels=[1, 2, 3, 4, 5]
    )
    assert ag.cohen_kappa(human, judge, quadratic=True) == pytest.approx(theirs, abs=1e-9)


def test_confusion_and_accuracy_equal_scikit_learn() -> None:
    human, judge = _scores(3)
    levels = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (
        ag.confusion(human, judge, levels)
        == sklearn_metrics.confusion_matrix(human, judge, labels=levels)
    ).all()
    matrix = ag.confusion(human, judge, levels)
    assert np.trace(matrix) / matrix.sum() == pytest.approx(
        sklearn_metrics.accuracy_score(human, judge), abs=1e-9
    )


@pytest.mark.parametrize("seed", [0, 4])
def test_rank_correlations_equal_scipy(seed: int) -> None:
    human, judge = _scores(seed, 120)
    assert ag.spearman(human, judge) == pytest.approx(
        stats.spearmanr(human, judge).statistic, abs=1e-9
    )
    assert ag.kendall(human, judge) == pytest.approx(
        stats.kendalltau(human, judge).statistic, abs=1e-9
    )


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_equals_the_package(level: str) -> None:
    rng = np.random.default_rng(5)
    truth = rng.integers(1, 6, 60).astype(float)
    coders = np.clip(truth + rng.choice([-1, 0, 0, 1], (3, 60)), 1, 5)
    coders[rng.random((3, 60)) < 0.2] = np.nan  # not every coder labels every unit
    assert ag.krippendorff_alpha(coders, level) == pytest.approx(
        krippendorff.alpha(reliability_data=coders, level_of_measurement=level), abs=1e-9
    )


def test_wilson_interval_equals_statsmodels() -> None:
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    lo, hi = proportion.proportion_confint(37, 80, alpha=0.05, method="wilson")
    assert ag.wilson(37, 80) == pytest.approx((lo, hi), abs=1e-9)


def test_an_unknown_alpha_level_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^unknown level 'ratio': nominal, ordinal or interval$"):
        ag.krippendorff_alpha([[1.0, 2.0], [1.0, 2.0]], "ratio")
