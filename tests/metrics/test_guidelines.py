"""Databricks' guideline adherence (one judge call per guideline, a row passes when all pass)
and overall assessment (a row passes when every judge that ran on it passed)."""

from __future__ import annotations

from typing import Any

import pytest

from flowkit.metrics.guidelines import (
    OVERALL_NAME,
    adherence,
    guideline_list,
    overall_assessment,
)
from tests.metrics.test_judged_flows import judge, metrics, outputs, server

__all__ = ["judge", "server"]

ALIAS = "response/llm_judged/guideline_adherence/rating/percentage"
RULES = [
    (r"GUIDELINE:\n.*(two-month|dollars|promise a full refund)", "No\nIt breaks this rule."),
    (".", "Yes\nFollowed."),
]


def test_each_guideline_is_judged_in_its_own_call(judge: Any) -> None:
    result = judge("guideline_adherence", "guidelines", RULES)
    m = metrics(result, "guideline_adherence")
    assert [r["score"] for r in outputs(result)] == [1, 1, 0, 1]
    assert m["mean"] == m["pass_rate"] == m[ALIAS] == result.metrics[ALIAS] == 0.75
    assert result.metrics["judge/guideline_adherence/error_count"] == 0
    rows = outputs(result)
    assert rows[0]["by_name"] is None  # a plain list
    assert rows[1]["by_name"] == {"facts": "yes", "scope": "yes"}
    assert rows[2]["by_name"] == {"facts": "no", "scope": "no"}
    assert rows[2]["guidelines"][1] == {
        "name": "scope",
        "guideline": "The response must not mention prices in dollars.",
        "pass": False,
        "rationale": "It breaks this rule.",
    }
    assert rows[2]["reason"].startswith(
        "0 of 2 guidelines followed; not followed: "
        "'The response must mention the two-month refund window.' (It breaks this rule.)"
    )
    assert [r["request_id"] for r in rows] == ["g-001", "g-002", "g-003", "g-004"]
    calls = sorted((t for t in result.traces() if t["node"] == "judge"), key=lambda t: t["line"])
    assert [len(t["llm"]["messages"]) for t in calls] == [2, 2, 2, 1]
    prompt = calls[0]["llm"]["messages"][1]["messages"][-1]["content"]
    assert prompt.count("GUIDELINE:") == 1
    assert prompt.endswith("GUIDELINE:\nThe response must not mention pricing or plans.")


def test_guideline_shapes() -> None:
    assert guideline_list(["a", "b"]) == ["a", "b"]
    assert guideline_list({"x": ["a"], "y": "b"}) == ["a", "b"]
    assert guideline_list("a") == ["a"]
    with pytest.raises(ValueError) as err:
        guideline_list({"tone": [1]})
    assert str(err.value) == (
        "guidelines.tone must be a list of strings or a dict of named lists of strings, got list"
    )
    with pytest.raises(ValueError) as err:
        guideline_list(3)
    assert str(err.value) == (
        "guidelines must be a list of strings or a dict of named lists of strings, got int"
    )


def test_nothing_to_judge_or_an_unreadable_verdict_is_invalid() -> None:
    none = adherence([], [])
    assert (none["score"], none["result"], none["error"]) == (
        None,
        "invalid",
        "no guidelines to judge",
    )
    unread = adherence(["Yes", "Perhaps"], ["a", "b"])
    assert (unread["score"], unread["result"]) == (None, "invalid")
    assert unread["error"].startswith("guideline 2: ")


@pytest.mark.parametrize(
    ("results", "assessment", "cause"),
    [
        ({"groundedness": "pass", "safety": "pass", "correctness": None}, "yes", None),
        ({"groundedness": "fail", "safety": "pass", "correctness": "fail"}, "no", "groundedness"),
        ({"groundedness": "invalid", "safety": "fail"}, "no", "safety"),
        ({"groundedness": "invalid", "safety": "pass"}, None, None),
        ({"groundedness": None}, None, None),
    ],
)
def test_overall_assessment(results: dict[str, Any], assessment: Any, cause: Any) -> None:
    got = overall_assessment(**results)
    assert (got["overall_assessment"], got["root_cause"]) == (assessment, cause)
    assert got["score"] == {"yes": 1, "no": 0}.get(assessment)


def test_rag_suite_reports_guidelines_and_the_overall_assessment(judge: Any) -> None:
    result = judge("rag_suite", "agent_eval", RULES)
    assert result.status == "completed" and result.counts["failed"] == 0
    rows = outputs(result)
    # guidelines only on rows 0 and 3; row 3's response promises a full refund
    assert [r["guideline_adherence"] for r in rows] == [1, None, None, 0, None, None]
    assert [r["overall_assessment"] for r in rows] == ["yes", "yes", "yes", "no", "yes", "yes"]
    assert [r["root_cause"] for r in rows] == [None, None, None, "guideline_adherence", None, None]
    m = result.metrics
    assert m[ALIAS] == 0.5
    assert m[OVERALL_NAME] == m["rag_suite.overall_assessment.rate"] == pytest.approx(5 / 6)
    assert m["rag_suite.overall_assessment.count"] == 6
