"""Tests for the structured judge parsers and the Databricks-style aggregate aliases."""

from __future__ import annotations

import json

import pytest

from flowkit.metrics.judges import (
    ALIASES,
    agent_summary,
    chunk_precision,
    parse_intents,
    parse_turn_scores,
)

# --------------------------------------------------------------------------- agent_summary


def test_agent_summary_adds_the_alias() -> None:
    out = agent_summary([1, 0, 1, None], "relevance_to_query")
    alias = "response/llm_judged/relevance_to_query/rating/percentage"
    assert out[alias] == out["mean"] == out["pass_rate"] == pytest.approx(2 / 3)
    assert (out["invalid"], out["count"]) == (1, 3)


def test_alias_ignores_the_threshold() -> None:
    # a stricter pass rule changes pass_rate, not the share of "yes"
    out = agent_summary([1, 0, 1, 1], "correctness", threshold=1, comparator=">")
    assert out["pass_rate"] == 0
    assert out["response/llm_judged/correctness/rating/percentage"] == 0.75


def test_safety_reports_a_defect_rate() -> None:
    out = agent_summary([1, 1, 0, 1], "safety", threshold=[1, 1, 1, 1], comparator=">=")
    assert out["defect_rate"] == pytest.approx(0.25)
    assert agent_summary([None], "safety")["defect_rate"] is None


def test_chunk_relevance_alias_is_mean_precision() -> None:
    out = agent_summary([0.5, 1.0, 2 / 3], "chunk_relevance", threshold=0.5)
    assert out["retrieval/llm_judged/chunk_relevance/precision/average"] == pytest.approx(13 / 18)


def test_unknown_judge_fails_loudly() -> None:
    with pytest.raises(ValueError, match="unknown judge 'relevance'"):
        agent_summary([1], "relevance")


def test_alias_names_have_no_dots() -> None:
    # the engine writes "<flow>.<key>"; a dot-free key keeps the split unambiguous
    assert all("." not in name for name in ALIASES.values())


# --------------------------------------------------------------------------- turns


def turns(*scores: object) -> str:
    return json.dumps(
        {
            "turns": [
                {"turn": i, "analysis": f"a{i}", "score": s} for i, s in enumerate(scores, start=1)
            ]
        }
    )


def test_turn_scores_take_the_minimum() -> None:
    out = parse_turn_scores(turns(5, 3, 4), count=3)
    assert (out["score"], out["result"], out["turn_scores"]) == (3, "fail", [5, 3, 4])
    assert out["reason"] == "lowest: turn 2: a2"
    assert out["error"] is None


def test_one_turn_reason_is_plain() -> None:
    out = parse_turn_scores("```json\n" + turns(4.5) + "\n```", count=1)
    assert (out["score"], out["result"], out["reason"]) == (4.5, "pass", "a1")


def test_turns_are_matched_by_number() -> None:
    reply = json.dumps({"turns": [{"turn": 2, "score": 1}, {"turn": 1, "score": 5}]})
    assert parse_turn_scores(reply, count=2)["turn_scores"] == [5, 1]


@pytest.mark.parametrize(
    ("reply", "count", "error"),
    [
        (turns(5), 2, "judge returned 1 turns, expected 2"),
        (turns(5, 6), 2, "turn 2: score 6 is not a number in 1–5"),
        (turns(5, "high"), 2, "turn 2: score 'high'"),
        (
            json.dumps({"turns": [{"turn": 1, "score": 5}, {"turn": 3, "score": 5}]}),
            2,
            "are not 1..2",
        ),
        ('{"score": 4, "reason": "one number"}', 1, "no JSON list of turns"),
        ("", 1, "no JSON list of turns"),
    ],
)
def test_unreadable_turns_are_invalid(reply: str, count: int, error: str) -> None:
    out = parse_turn_scores(reply, count=count)
    assert (out["score"], out["result"]) == (None, "invalid")
    assert error in out["error"]


def test_turn_threshold_and_comparator() -> None:
    assert parse_turn_scores(turns(3), 1, threshold=3, comparator=">=")["result"] == "pass"
    assert parse_turn_scores(turns(3), 1, threshold=3, comparator=">")["result"] == "fail"


# --------------------------------------------------------------------------- chunks


def test_chunk_precision_from_one_reply_per_chunk() -> None:
    out = chunk_precision(["Yes, it covers it.", "No - unrelated.", "**Yes**"])
    assert (out["score"], out["result"], out["verdicts"]) == (2 / 3, "pass", [1, 0, 1])
    assert out["reason"].startswith("2 of 3 chunks relevant; chunk 1: yes")


def test_chunk_precision_below_threshold_fails() -> None:
    out = chunk_precision(["No", "No", "Yes"], threshold=0.5)
    assert (out["score"], out["result"]) == (1 / 3, "fail")


def test_no_chunks_means_no_precision() -> None:
    out = chunk_precision([])
    assert (out["score"], out["result"], out["verdicts"]) == (None, "invalid", [])
    assert out["error"] == "no retrieved chunks to judge"


def test_an_unreadable_chunk_reply_makes_the_row_invalid() -> None:
    out = chunk_precision(["Yes", "I cannot tell."])
    assert out["result"] == "invalid" and out["error"].startswith("chunk 2: ")


def test_a_chunk_reply_cut_off_at_the_token_limit_makes_the_row_invalid() -> None:
    cut = {"text": "Yes, because", "choices": ["Yes, because"], "finish_reason": "length"}
    out = chunk_precision(["No", cut])
    assert (out["result"], out["raw"]) == ("invalid", "No\n---\nYes, because")
    assert out["error"] == (
        "chunk 2: reply cut off at the token limit (finish_reason 'length'); raise max_tokens"
    )


def intents(*answered: str, reason: str | None = None) -> str:
    body: dict[str, object] = {
        "intents": [
            {"intent": f"i{n}", "answered": a, "doc_ids": ["d1"] if a == "yes" else []}
            for n, a in enumerate(answered, start=1)
        ]
    }
    if reason:
        body["reason"] = reason
    return json.dumps(body)


@pytest.mark.parametrize(
    ("answered", "score", "fraction"),
    [
        (("yes",), 5, 1.0),
        (("yes", "no"), 2, 0.5),
        (("no",), 1, 0.0),
        (("yes", "yes", "no"), 1 + 4 * (2 / 3) ** 2, 2 / 3),
    ],
)
def test_intents_score_is_one_plus_four_fraction_squared(
    answered: tuple[str, ...], score: float, fraction: float
) -> None:
    out = parse_intents(intents(*answered))
    assert out["score"] == pytest.approx(score)
    assert out["fraction"] == pytest.approx(fraction)


def test_intents_reason_and_details() -> None:
    out = parse_intents(intents("yes", "no", reason="Prices only."))
    assert out["reason"] == "1 of 2 intents answered; not answered: i2. Prices only."
    assert out["intents"][0] == {"intent": "i1", "answered": True, "doc_ids": ["d1"]}
    assert out["result"] == "fail"  # 2 is not > 3


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ('{"intents": []}', "judge found no intent"),
        (intents("partly"), "intent 1: verdict 'partly' is not yes or no"),
        ("# Result\n4", "no JSON list of intents"),
    ],
)
def test_unreadable_intents(reply: str, error: str) -> None:
    out = parse_intents(reply)
    assert (out["score"], out["result"]) == (None, "invalid")
    assert error in out["error"]
