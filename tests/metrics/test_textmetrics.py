"""Token F1 and exact match, with expected values worked out by hand (METRICS.md, section B)."""

from __future__ import annotations

import pytest

from flowkit.metrics.text import exact_match, f1_score, normalize, token_f1


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   cat,\tan  owl; the END. ", "cat owl end"),
        ("Theatre and another anthem", "theatre and another anthem"),  # articles only as words
        ("U.S.A. -- it's 100%", "usa its 100"),
        ("", ""),
        ("The a an", ""),
    ],
)
def test_normalize(text: str, normal: str) -> None:
    assert normalize(text) == normal


@pytest.mark.parametrize(
    ("answer", "truth", "f1"),
    [
        ("Paris", "paris.", 1.0),  # case and punctuation do not count
        ("The capital is Paris", "Paris", 2 * (1 / 3) * 1 / (1 / 3 + 1)),  # P 1/3, R 1 → 0.5
        ("the cat sat", "a cat sat down", 2 * 1 * (2 / 3) / (1 + 2 / 3)),  # P 1, R 2/3 → 0.8
        ("cat cat cat", "cat", 0.5),  # repeated tokens: common 1, P 1/3, R 1
        ("cat cat", "cat cat dog", 2 * 1 * (2 / 3) / (1 + 2 / 3)),  # common 2 with multiplicity
        ("dog", "cat", 0.0),
        ("", "cat", 0.0),
        ("cat", "", 0.0),
        ("", "", 0.0),  # nothing in common is 0, as METRICS.md says
        ("The", "the", 0.0),  # only articles: both empty after normalising
    ],
)
def test_token_f1(answer: str, truth: str, f1: float) -> None:
    assert token_f1(answer, truth) == pytest.approx(f1)


def test_f1_score_takes_the_best_accepted_answer_and_applies_the_threshold() -> None:
    assert f1_score("Carbon dioxide.", ["carbon dioxide", "CO2"]) == {
        "score": 1.0,
        "result": "pass",
    }
    assert f1_score("It is CO2", ["carbon dioxide", "CO2"]) == {
        "score": pytest.approx(0.5),
        "result": "pass",
    }  # vs "co2": P 1/3, R 1
    assert f1_score("It is CO2", "CO2", threshold=0.6) == {
        "score": pytest.approx(0.5),
        "result": "fail",
    }
    assert f1_score("Saturn", "Jupiter") == {"score": 0.0, "result": "fail"}


def test_exact_match_is_character_for_character_unless_normalised() -> None:
    assert exact_match("Paris", "Paris") == {"score": 1, "result": "pass"}
    assert exact_match("paris", "Paris") == {"score": 0, "result": "fail"}
    assert exact_match("Paris.", "Paris") == {"score": 0, "result": "fail"}
    assert exact_match("The Paris.", "paris", normalize_text=True) == {"score": 1, "result": "pass"}
    assert exact_match("", "") == {"score": 1, "result": "pass"}


def test_exact_match_accepts_any_answer_of_a_list() -> None:
    assert exact_match("CO2", ["carbon dioxide", "CO2"]) == {"score": 1, "result": "pass"}
    assert exact_match("co2", ["carbon dioxide", "CO2"]) == {"score": 0, "result": "fail"}
    assert exact_match("co2", ["carbon dioxide", "CO2"], normalize_text=True)["score"] == 1


def test_a_ground_truth_of_nothing_is_a_data_error() -> None:
    with pytest.raises(ValueError, match="empty list"):
        f1_score("x", [])
    with pytest.raises(ValueError, match="null"):
        exact_match("x", None)  # type: ignore[arg-type]
