"""The parsing rules users bring from other tools: Spring AI's `contains`, Prompt Flow's
invalid-as-fail pass rate, and Azure's "Yes, documents [doc1], [doc2]" intent answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowkit.errors import UsageError
from flowkit.metrics.aggregate import score_summary
from flowkit.metrics.judges import agent_summary, parse_intents
from flowkit.metrics.scores import parse_score
from tests.metrics.test_judged_flows import judge, metrics, server

__all__ = ["judge", "server"]


@pytest.mark.parametrize(
    ("reply", "score", "reason"),
    [
        ("The answer is YES", 1, "The answer is YES"),
        ("yes", 1, None),
        ("Yes. It fits.", 1, "It fits."),
        ("No, yesterday's data is missing.", 0, "yesterday's data is missing."),  # first word
        ("It said yesterday that YES holds.", 1, "It said yesterday that YES holds."),
        ("NO", 0, None),
        ("I cannot say.", 0, "I cannot say."),  # no YES: a fail, never unreadable
        ("", 0, None),
    ],
)
def test_contains_mode(reply: str, score: int, reason: str | None) -> None:
    out = parse_score(reply, min=0, max=1, threshold=1, comparator=">=", mode="contains")
    assert (out["score"], out["reason"], out["error"]) == (score, reason, None)
    assert out["result"] == ("pass" if score else "fail")


def test_yes_no_mode_still_wants_the_word_first() -> None:
    out = parse_score("The answer is YES", min=0, max=1, mode="yes_no")
    assert (out["result"], out["error"]) == ("invalid", "no score found (yes_no form)")


def test_invalid_as_fail_matches_prompt_flow() -> None:
    scores = [5, 4, None, 2]  # one unreadable reply
    default = score_summary(scores, 3, ">")
    assert (default["pass_rate"], default["count"], default["invalid"]) == (2 / 3, 3, 1)
    pf = score_summary(scores, [3] * 4, [">"] * 4, invalid_as_fail=[True] * 4)
    assert pf["pass_rate"] == 2 / 4
    assert pf["mean"] == default["mean"]  # the mean still leaves the unreadable row out
    assert agent_summary([1, None], "safety", invalid_as_fail=True)["pass_rate"] == 1 / 2


def test_intents_in_the_documented_answer_form() -> None:
    reply = json.dumps(
        {
            "intents": [
                {"intent": "opening hours", "answered": "Yes, documents [doc1], [doc2]"},
                {"intent": "prices", "answered": "No"},
            ]
        }
    )
    out = parse_intents(reply)
    assert out["fraction"] == 0.5 and out["score"] == 1 + 4 * 0.5**2
    assert out["intents"][0] == {
        "intent": "opening hours",
        "answered": True,
        "doc_ids": ["doc1", "doc2"],
    }


@pytest.mark.parametrize("flow", ["relevancy_yes_no", "answer_correctness_yes_no", "fact_check"])
def test_spring_style_flows_read_the_verdict_first(judge: Any, flow: str) -> None:
    # qa.jsonl row 3 (spider) opens with NO and says yes later: a fail; row 5 (Saturn) says
    # both in its verdict position: invalid, never a pass.
    rules = [
        ("(?i)spider", "NO. The response says yes to the question, but the context disagrees."),
        ("(?i)Saturn", "YES or NO: hard to tell."),
        (".", "**YES**\nIt fits the context."),
    ]
    result = judge(flow, "qa", rules)
    m = metrics(result, flow)
    assert (m["invalid"], m["count"], m["pass_rate"]) == (1, 5, pytest.approx(4 / 5))
    rows = [row["outputs"] for row in result.rows()]
    assert [r["score"] for r in rows] == [1, 1, 1, 0, 1, None]
    assert rows[5]["result"] == "invalid"


def test_fact_check_prompt_is_document_and_claim_only(judge: Any) -> None:
    result = judge("fact_check", "qa", [(".", "Yes")])
    first = next(t for t in result.traces() if t["node"] == "judge")
    (message,) = first["llm"]["messages"]
    assert message["role"] == "user"
    lines = message["content"].split("\n")
    assert lines[0].startswith("Document: ") and lines[-1].startswith("Claim: ")


def test_invalid_as_fail_is_a_flow_input(judge: Any) -> None:
    rules = [("spider", "I'd rather not rate this."), (".", "Fine.\nScore: 5")]
    base = metrics(judge("coherence", "qa", rules), "coherence")
    pf = metrics(judge("coherence", "qa", rules, mapping={"invalid_as_fail": "true"}), "coherence")
    assert (base["pass_rate"], pf["pass_rate"]) == (1.0, pytest.approx(5 / 6))
    assert base["invalid"] == pf["invalid"] == 1


def test_settings_that_python_finds_equal_but_read_differently_do_not_share_a_check() -> None:
    # YAML reads `{yes: 1, no: 0}` as boolean keys; the words are then "true" and "false".
    booleans = {True: 1, False: 0}
    numbers = {1: 1, 0: 0}
    assert parse_score("true", mode="yes_no", yes_no=booleans, threshold=0.5)["score"] == 1
    assert parse_score("1", mode="yes_no", yes_no=numbers, threshold=0.5)["score"] == 1
    assert parse_score("true", mode="yes_no", yes_no=numbers)["result"] == "invalid"
    assert parse_score("1", mode="yes_no", yes_no=booleans)["result"] == "invalid"


def test_settings_that_cannot_be_hashed_are_still_checked() -> None:
    class Words(dict):  # a mapping whose values are lists: no hashable key can be made
        pass

    with pytest.raises(UsageError, match="yes_no must map answer words to numbers"):
        parse_score("yes", mode="yes_no", yes_no=Words(yes=[1], no=[0]))
