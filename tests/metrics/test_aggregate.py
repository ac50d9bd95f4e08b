"""Tests for the built-in aggregate functions, against values worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from flowkit.metrics.aggregate import (
    _broadcast,
    compare,
    counts,
    defect_rate,
    mean,
    mean_of,
    pass_rate,
    score_summary,
    sums,
    yes_rate,
)

# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [
        (4, ">", 3, True),
        (3, ">", 3, False),
        (3, ">=", 3, True),
        (2, "<", 3, True),
        (3, "<", 3, False),
        (3, "<=", 3, True),
        (3, "==", 3.0, True),
        (4, "==", 3, False),
    ],
)
def test_compare(a: float, op: str, b: float, expected: bool) -> None:
    assert compare(a, op, b) is expected


@pytest.mark.parametrize("op", ["=", "!=", "gt", "", None])
def test_compare_rejects_unknown_comparator_naming_valid_ones(op: object) -> None:
    with pytest.raises(ValueError, match=r">, >=, <, <=, =="):
        compare(1, op, 2)  # type: ignore[arg-type]


def test_broadcast_scalar_and_list() -> None:
    assert _broadcast(3, 2) == [3, 3]
    assert _broadcast([1, 2], 2) == [1, 2]
    assert _broadcast((1, 2), 2) == [1, 2]
    assert _broadcast(None, 0) == []
    with pytest.raises(ValueError, match="3 items but there are 2 rows"):
        _broadcast([1, 2, 3], 2)


def test_non_list_values_are_rejected() -> None:
    with pytest.raises(TypeError, match="one item per row"):
        mean(4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="one item per row"):
        counts("abc")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ mean


def test_mean_mixed_valid_and_none() -> None:
    # valid [4, 2, 5]: mean 11/3; squared deviations 1/9 + 25/9 + 16/9 = 42/9, / 2 = 7/3
    out = mean(values=[4, None, 2, 5, None])
    assert out["mean"] == pytest.approx(11 / 3)
    assert out["count"] == 3
    assert out["invalid"] == 2
    assert out["min"] == 2
    assert out["max"] == 5
    assert out["stdev"] == pytest.approx(math.sqrt(7 / 3))


def test_mean_all_none_and_empty() -> None:
    none = {"mean": None, "count": 0, "invalid": 3, "min": None, "max": None, "stdev": None}
    assert mean([None, None, None]) == none
    assert mean([]) == {**none, "invalid": 0}


def test_mean_single_value_has_no_stdev() -> None:
    assert mean([7])["stdev"] is None
    assert mean([7])["mean"] == 7


def test_mean_treats_nan_inf_and_garbage_as_invalid_and_reads_numeric_text() -> None:
    out = mean([float("nan"), float("inf"), "n/a", " 4 ", "2.5"])
    assert out["mean"] == pytest.approx(3.25)
    assert out["count"] == 2
    assert out["invalid"] == 3
    json.dumps(out, allow_nan=False)  # strict JSON


def test_mean_of_ignores_none() -> None:
    assert mean_of(values=[0.5, None, 1.0, 0.0]) == {"mean": pytest.approx(0.5), "count": 3}
    assert mean_of([None]) == {"mean": None, "count": 0}
    assert mean_of([]) == {"mean": None, "count": 0}


# ------------------------------------------------------------------------- pass rate


@pytest.mark.parametrize(
    ("comparator", "passed"),
    [(">", 2), (">=", 3), ("<", 2), ("<=", 3), ("==", 1)],
)
def test_pass_rate_each_comparator(comparator: str, passed: int) -> None:
    out = pass_rate(values=[1, 2, 3, 4, 5, None], threshold=3, comparator=comparator)
    assert out == {"pass_rate": passed / 5, "passed": passed, "count": 5, "invalid": 1}


def test_pass_rate_default_comparator_is_strictly_greater() -> None:
    assert pass_rate([3, 4], 3)["passed"] == 1


def test_pass_rate_excludes_invalid_from_denominator() -> None:
    # valid [5, 1, 4]: 5 and 4 pass -> 2/3, not 2/5
    out = pass_rate([5, None, 1, None, 4], threshold=3)
    assert out == {"pass_rate": pytest.approx(2 / 3), "passed": 2, "count": 3, "invalid": 2}


def test_pass_rate_per_row_threshold_list() -> None:
    # 4 > 3 pass, 4 > 5 fail, 2 > 1 pass
    out = pass_rate([4, 4, 2], threshold=[3, 5, 1])
    assert out["passed"] == 2
    assert out["pass_rate"] == pytest.approx(2 / 3)
    # a flow input read from CSV arrives as text
    assert pass_rate([4, 4, 2], threshold=["3", "5", "1"])["passed"] == 2


def test_pass_rate_per_row_comparator_list() -> None:
    out = pass_rate([3, 3], threshold=3, comparator=[">", ">="])
    assert out["passed"] == 1


def test_pass_rate_booleans_and_words_ignore_threshold() -> None:
    out = pass_rate([True, False, True, None], threshold=None)
    assert out == {"pass_rate": pytest.approx(2 / 3), "passed": 2, "count": 3, "invalid": 1}
    out = pass_rate(["pass", "FAIL", " Pass ", "invalid", "fail"], threshold=None)
    assert out == {"pass_rate": pytest.approx(2 / 4), "passed": 2, "count": 4, "invalid": 1}


def test_pass_rate_all_none_and_empty() -> None:
    assert pass_rate([None, None], 3) == {
        "pass_rate": None,
        "passed": 0,
        "count": 0,
        "invalid": 2,
    }
    assert pass_rate([], 3) == {"pass_rate": None, "passed": 0, "count": 0, "invalid": 0}
    assert pass_rate([], [], comparator=">=")["pass_rate"] is None


def test_pass_rate_errors() -> None:
    with pytest.raises(ValueError, match="unknown comparator"):
        pass_rate([], 3, comparator="=>")  # typo caught even with no rows
    with pytest.raises(ValueError, match="row 1: threshold None"):
        pass_rate([True, 4], threshold=None)
    with pytest.raises(ValueError, match="2 items but there are 3 rows"):
        pass_rate([1, 2, 3], threshold=[1, 2])


# --------------------------------------------------------------------- score summary


def test_score_summary_mixed() -> None:
    # valid [5, 3, 4, 1]: mean 13/4; > 3 passes 5 and 4 -> 2/4; 1 invalid of 5 rows
    # squared deviations 3.0625 + 0.0625 + 0.5625 + 5.0625 = 8.75, / 3
    out = score_summary(scores=[5, 3, None, 4, 1])
    assert out == {
        "mean": pytest.approx(3.25),
        "pass_rate": pytest.approx(0.5),
        "invalid": 1,
        "invalid_rate": pytest.approx(0.2),
        "count": 4,
        "stdev": pytest.approx(math.sqrt(8.75 / 3)),
    }


def test_score_summary_threshold_and_comparator() -> None:
    scores = [5, 3, None, 4, 1]
    assert score_summary(scores, threshold=3, comparator=">=")["pass_rate"] == pytest.approx(0.75)
    assert score_summary(scores, threshold=[4, 4, 4, 4, 4])["pass_rate"] == pytest.approx(0.25)
    assert score_summary(scores, threshold="2", comparator="<")["pass_rate"] == pytest.approx(0.25)


def test_score_summary_mean_and_pass_rate_count_the_same_rows() -> None:
    # "pass" is not a score: invalid for both the mean and the pass rate
    out = score_summary(["pass", 4, 2, "4.5"])
    assert out["count"] == 3
    assert out["invalid"] == 1
    assert out["mean"] == pytest.approx(3.5)
    assert out["pass_rate"] == pytest.approx(2 / 3)


def test_score_summary_all_none() -> None:
    out = score_summary([None, None, None], threshold=[3, 3, 3])
    assert out == {
        "mean": None,
        "pass_rate": None,
        "invalid": 3,
        "invalid_rate": 1.0,
        "count": 0,
        "stdev": None,
    }


def test_score_summary_empty() -> None:
    out = score_summary([])
    assert out == {
        "mean": None,
        "pass_rate": None,
        "invalid": 0,
        "invalid_rate": None,
        "count": 0,
        "stdev": None,
    }
    json.dumps(out, allow_nan=False)


# ----------------------------------------------------------------------- defect rate

SEVERITIES = ["Very low", "LOW", "medium", " High ", None, 3, 0, "bogus"]
# valid indices [0, 1, 2, 3, 3, 0] (6 rows), invalid: None and "bogus"


def test_defect_rate_labels_indices_and_none() -> None:
    out = defect_rate(severities=SEVERITIES)
    assert out == {
        "defect_rate": pytest.approx(3 / 6),
        "defect_rate@low": pytest.approx(4 / 6),
        "defect_rate@medium": pytest.approx(3 / 6),
        "defect_rate@high": pytest.approx(2 / 6),
        "count": 6,
        "invalid": 2,
    }


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        ("very low", 1.0),
        ("low", 4 / 6),
        ("Medium", 3 / 6),
        ("HIGH", 2 / 6),
        (3, 2 / 6),
        ("1", 4 / 6),
    ],
)
def test_defect_rate_threshold_levels(threshold: object, expected: float) -> None:
    assert defect_rate(SEVERITIES, threshold=threshold)["defect_rate"] == pytest.approx(expected)


def test_defect_rate_per_row_threshold() -> None:
    # low>=high no, medium>=low yes, high>=high yes
    out = defect_rate(["low", "medium", 3], threshold=["high", "low", "high"])
    assert out["defect_rate"] == pytest.approx(2 / 3)
    assert out["defect_rate@medium"] == pytest.approx(2 / 3)


def test_defect_rate_indices_out_of_range_and_booleans_are_invalid() -> None:
    out = defect_rate([4, -1, True, 2.0, "very_low"])
    assert out["count"] == 2
    assert out["invalid"] == 3
    assert out["defect_rate"] == pytest.approx(0.5)


def test_defect_rate_all_none_and_empty() -> None:
    none = {
        "defect_rate": None,
        "defect_rate@low": None,
        "defect_rate@medium": None,
        "defect_rate@high": None,
        "count": 0,
        "invalid": 2,
    }
    assert defect_rate([None, None]) == none
    assert defect_rate([]) == {**none, "invalid": 0}


def test_defect_rate_custom_levels() -> None:
    out = defect_rate(["safe", "Unsafe", 1, None], threshold="unsafe", levels=["safe", "unsafe"])
    assert out == {
        "defect_rate": pytest.approx(2 / 3),
        "defect_rate@unsafe": pytest.approx(2 / 3),
        "count": 3,
        "invalid": 1,
    }


def test_defect_rate_errors() -> None:
    with pytest.raises(ValueError, match="not one of the levels"):
        defect_rate([], threshold="severe")
    with pytest.raises(ValueError, match="row 1: threshold"):
        defect_rate(["low", "low"], threshold=["low", None])
    with pytest.raises(ValueError, match="distinct"):
        defect_rate(["a"], threshold="a", levels=["a", "A"])


# ------------------------------------------------------------------ yes rate, counts


def test_yes_rate_mixed_encodings() -> None:
    # yes: 1, "yes", True, "TRUE", 1.0, "1"; no: 0, "No", False, "false"; invalid: None, "maybe", 2
    values = [1, "yes", True, "TRUE", 1.0, "1", 0, "No", False, "false", None, "maybe", 2]
    out = yes_rate(values=values)
    assert out == {"rate": pytest.approx(6 / 10), "count": 10, "invalid": 3}


def test_yes_rate_all_invalid_and_empty() -> None:
    assert yes_rate([None, "?"]) == {"rate": None, "count": 0, "invalid": 2}
    assert yes_rate([]) == {"rate": None, "count": 0, "invalid": 0}


def test_counts_key_safety() -> None:
    out = counts(values=["Very Low", "very low", "High", None, 3, 3.0, True, "a.b", "", "x/y z"])
    assert out == {
        "count": 10,
        "n_3": 2,
        "n_a_b": 1,
        "n_empty": 1,
        "n_high": 1,
        "n_none": 1,
        "n_true": 1,
        "n_very_low": 2,
        "n_x_y_z": 1,
    }
    assert next(iter(out)) == "count"


def test_counts_empty() -> None:
    assert counts([]) == {"count": 0}


# ---------------------------------------------------------------------------- sums


def test_sums_token_columns() -> None:
    out = sums(prompt_tokens=[100, None, 50], completion_tokens=[10, 20, 30], cost=[None, None])
    assert out == {
        "prompt_tokens.sum": 150,
        "prompt_tokens.mean": pytest.approx(75.0),
        "completion_tokens.sum": 60,
        "completion_tokens.mean": pytest.approx(20.0),
        "cost.sum": None,
        "cost.mean": None,
    }
    assert isinstance(out["prompt_tokens.sum"], int)


def test_sums_no_columns() -> None:
    assert sums() == {}


def test_every_result_is_strict_json() -> None:
    results = [
        mean([None]),
        pass_rate([None], 3),
        score_summary([None]),
        defect_rate([None]),
        counts([None]),
        yes_rate([None]),
        sums(t=[None]),
        mean_of([None]),
    ]
    for result in results:
        json.dumps(result, allow_nan=False)


def test_labels_a_metric_name_cannot_spell_apart_still_get_keys_of_their_own() -> None:
    # "C++", "C#" and "C" once all became n_c (and "+1"/"-1" class.1): one label's numbers
    # replaced another's without a word. Case and spacing alone still count as one label.
    from flowkit.metrics.aggregate import counts
    from flowkit.metrics.classification import summary

    tally = counts(["да", "нет", "нет", "C++", "C#", "C", "Yes", " yes"])
    assert tally["count"] == 8
    assert tally["n_да"] == 1 and tally["n_нет"] == 2 and tally["n_yes"] == 2
    assert tally["n_c"] == 1
    assert sorted(v for k, v in tally.items() if k.startswith("n_c_")) == [1, 1]
    assert len(tally) == 7  # count, да, нет, yes, c, and c++ and c# apart

    metrics = summary(["+1", "-1", "+1"], ["+1", "-1", "-1"])
    supports = sorted(v for k, v in metrics.items() if k.endswith(".support"))
    assert supports == [1, 2]  # two classes, two keys
