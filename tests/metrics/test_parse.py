"""Tests for reading judge replies into scores; expected values are worked out by hand."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowkit.errors import UsageError
from flowkit.metrics.scores import combine_scores, parse_score, passes, score_from_top_logprobs

# --------------------------------------------------------------------------- forms (auto mode)

READABLE = [
    # JSON
    ('{"score": 4, "reason": "Accurate and complete."}', 4, "Accurate and complete."),
    ('{"Score": 2, "reasoning": "Misses the date."}', 2, "Misses the date."),
    ('{"rating": 5, "rationale": "Perfect."}', 5, "Perfect."),
    ('{"score": "4", "feedback": "ok"}', 4, "ok"),
    ('{"relevance_score": 3, "explanation": "Partly on topic."}', 3, "Partly on topic."),
    ('{"evaluation": {"score": 4, "reason": "nested"}}', 4, "nested"),
    (
        'Let me check the claims first.\n```json\n{"score": 5, "reason": "All supported."}\n```',
        5,
        "All supported.",
    ),
    ('I checked 3 sources.\n```json\n{"rating": 2}\n```', 2, "I checked 3 sources."),
    # tags
    (
        "<S0>Check 3 facts.</S0><S1>The answer is grounded.</S1><S2>4</S2>",
        4,
        "The answer is grounded.",
    ),
    ("<score>2</score>", 2, None),
    ("<score> 5 </score><reason>Fully relevant.</reason>", 5, "Fully relevant."),
    # Result heading
    ("# Reasoning\nThe answer is fluent.\n\n# Result\n\n4\n", 4, "The answer is fluent."),
    ("## Result\n2.", 2, None),
    ("Some thinking.\n## Result: 5", 5, "Some thinking."),
    # labelled
    ("Score: 4", 4, None),
    ("score = 4", 4, None),
    ("Rating: 4.5", 4.5, None),
    ("Quality score: 4/5", 4, None),
    ("**Score:** 3\n**Reason:** Vague in places.", 3, "Vague in places."),
    ("Score (1-5): 2", 2, None),
    ("The answer covers the main point.\nScore: 4", 4, "The answer covers the main point."),
    (
        "Reasoning: a score of 2 would be too harsh.\nScore: 4",
        4,
        "a score of 2 would be too harsh.",
    ),
    (
        "Step 1 looks fine. Step 2 is wrong.\nFinal rating: 2",
        2,
        "Step 1 looks fine. Step 2 is wrong.",
    ),
    ("I would give it a score of 3.", 3, "I would give it a score of 3."),
    # ratios
    ("4/5", 4, None),
    ("4 out of 5", 4, None),
    (
        "The answer has 3 problems and I rate it 2 out of 5",
        2,
        "The answer has 3 problems and I rate it 2 out of 5",
    ),
    (
        "2 out of 3 claims are supported, so 3/5 overall.",
        3,
        "2 out of 3 claims are supported, so 3/5 overall.",
    ),
    # bare numbers
    ("4", 4, None),
    ("  3. \n", 3, None),
    ("[[5]]", 5, None),
    ("4\nThe answer is accurate.", 4, "The answer is accurate."),
    ("The answer is correct.\n\n4", 4, "The answer is correct."),
    ("3.0", 3, None),
]


@pytest.mark.parametrize(("reply", "score", "reason"), READABLE)
def test_auto_reads_each_form(reply: str, score: float, reason: str | None) -> None:
    out = parse_score(reply)
    assert out["score"] == score, out
    assert out["reason"] == reason
    assert out["error"] is None
    assert out["raw"] == reply
    assert out["samples"] == 1
    assert out["result"] == ("pass" if score > 3 else "fail")


def test_integral_scores_come_back_as_int() -> None:
    assert type(parse_score("Score: 4.0")["score"]) is int
    assert type(parse_score("Score: 4.5")["score"]) is float


def test_result_is_json_serialisable() -> None:
    out = parse_score(['{"score": 4}', "Score: 5", "nonsense"])
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # A JSON verdict beats the prose around it.
        ('Score: 2 at first glance.\n{"score": 4}', 4),
        # A tag beats a labelled line inside the reasoning.
        ("<S0>Score: 2 seemed right</S0><S2>5</S2>", 5),
        # ":" beats "of": the prose mention is not the verdict.
        ("Score: 4\nA score of 2 would be unfair.", 4),
        # The last labelled verdict wins, since it follows the reasoning.
        ("Score: 2 for clarity... on reflection\nScore: 4", 4),
        # A labelled score beats an "out of" in the explanation.
        ("2 out of 5 sentences are long.\nScore: 4", 4),
        # A ratio on another denominator is a fact, not the score.
        ("1/2 of the claims hold. I rate it 3 out of 5.", 3),
        # Dates are not ratios.
        ("Published 4/5/2024. Rating: 2", 2),
    ],
)
def test_precedence(reply: str, score: int) -> None:
    assert parse_score(reply)["score"] == score


# --------------------------------------------------------------------------- explicit modes


@pytest.mark.parametrize(
    ("reply", "mode", "kwargs", "score"),
    [
        ("Score: 4", "number", {}, 4),
        ('{"score": 4}', "json", {}, 4),
        ("# Result\n3", "result_heading", {}, 3),
        ("<S1>why</S1><S2>4</S2>", "tag", {"tag": "S2"}, 4),
        ("<S2>4</S2><S3>2</S3>", "auto", {"tag": "S3"}, 2),
        ("No it cannot be scored", "yes_no", {"min": 0, "max": 1}, 0),
    ],
)
def test_explicit_modes(reply: str, mode: str, kwargs: dict[str, Any], score: int) -> None:
    assert parse_score(reply, mode=mode, **kwargs)["score"] == score


@pytest.mark.parametrize(
    ("reply", "mode", "kwargs", "error"),
    [
        ("Score: 4", "json", {}, "no score found (json form)"),
        ('{"score": 4}', "result_heading", {}, "no score found (result_heading form)"),
        ("Score: 4", "tag", {"tag": "S2"}, "no <S2> tag found"),
        ("<S2>good</S2>", "tag", {"tag": "S2"}, "<S2> holds no number"),
        ("# Result\nexcellent", "result_heading", {}, "no number under the Result heading"),
        ("Score: 4", "yes_no", {}, "no score found (yes_no form)"),
    ],
)
def test_explicit_modes_reject_other_forms(
    reply: str, mode: str, kwargs: dict[str, Any], error: str
) -> None:
    out = parse_score(reply, mode=mode, **kwargs)
    assert (out["score"], out["result"], out["error"]) == (None, "invalid", error)


# --------------------------------------------------------------------------- yes / no


@pytest.mark.parametrize(
    ("reply", "score", "reason"),
    [
        ("Yes.", 1, None),
        ("**No**", 0, None),
        ("yes, because it cites sources", 1, "because it cites sources"),
        ("NO - the answer invents a date.", 0, "the answer invents a date."),
    ],
)
def test_yes_no_default_mapping(reply: str, score: int, reason: str | None) -> None:
    out = parse_score(reply, min=0, max=1, threshold=1, comparator=">=")
    assert (out["score"], out["reason"]) == (score, reason)
    assert out["result"] == ("pass" if score else "fail")


def test_yes_no_custom_mapping() -> None:
    mapping = {"Pass": 5, "Fail": 1, "Not sure": 3}
    kw: dict[str, Any] = {"mode": "yes_no", "yes_no": mapping}
    assert parse_score("PASS - good", **kw)["score"] == 5
    assert parse_score("fail", **kw)["result"] == "fail"
    assert parse_score("Not sure, it depends", **kw)["score"] == 3
    assert parse_score("yes", **kw)["result"] == "invalid"


def test_yes_no_outside_the_scale_is_invalid() -> None:
    # The default mapping is no score on a scale it does not span, so a 1–5 flow cannot take
    # "no" as 0 (nor "yes" as a failing 1).
    out = parse_score("No.")
    assert out["result"] == "invalid"
    assert out["error"] == "a yes/no reply on a 1–5 scale (yes_no maps yes to 1 and no to 0)"


def test_auto_needs_a_standalone_yes_no() -> None:
    assert parse_score("No it cannot be scored here", min=0, max=1)["result"] == "invalid"
    assert parse_score("No it cannot be scored here", min=0, max=1, mode="yes_no")["score"] == 0


# --------------------------------------------------------------------------- comparators


@pytest.mark.parametrize(
    ("score", "comparator", "threshold", "result"),
    [
        (4, ">", 3, "pass"),
        (3, ">", 3, "fail"),
        (3, ">=", 3, "pass"),
        (2, ">=", 3, "fail"),
        (2, "<", 3, "pass"),
        (3, "<", 3, "fail"),
        (3, "<=", 3, "pass"),
        (4, "<=", 3, "fail"),
        (3, "==", 3, "pass"),
        (4, "==", 3, "fail"),
    ],
)
def test_comparators(score: int, comparator: str, threshold: int, result: str) -> None:
    out = parse_score(f"Score: {score}", threshold=threshold, comparator=comparator)
    assert out["result"] == result
    assert passes(score, threshold, comparator) is (result == "pass")


def test_passes_tolerates_float_noise() -> None:
    assert passes(0.1 + 0.2, 0.3, ">=")
    assert not passes(0.1 + 0.2, 0.3, ">")
    assert passes(0.1 + 0.2, 0.3, "==")


def test_threshold_may_be_a_numeric_string() -> None:
    assert parse_score("Score: 4", threshold="3.5")["result"] == "pass"


# --------------------------------------------------------------------------- n samples


@pytest.mark.parametrize(
    ("replies", "combine", "score", "samples"),
    [
        (["Score: 4", "Score: 5", "Score: 3"], "mean", 4, 3),
        (["4", "5"], "mean", 4.5, 2),
        (["4", "nonsense", "Score: 9", "2"], "mean", 3, 2),
        (["4", "2", "4"], "majority", 4, 3),
        (["2", "4"], "majority", 2, 2),  # a tie goes to the lowest tied value
        (["5", "5", "1", "1", "3"], "majority", 1, 5),
        (["", "3", "I can't say"], "majority", 3, 1),
    ],
)
def test_samples(replies: list[str], combine: str, score: float, samples: int) -> None:
    out = parse_score(replies, combine=combine)
    assert (out["score"], out["samples"], out["error"]) == (score, samples, None)


def test_samples_reason_comes_from_an_agreeing_sample() -> None:
    out = parse_score(["Score: 2\nToo short.", "Score: 4\nGood.", "Score: 4"], combine="majority")
    assert (out["score"], out["reason"]) == (4, "Good.")


def test_all_samples_invalid() -> None:
    out = parse_score(["", "Score: 9"])
    assert (out["score"], out["result"], out["samples"]) == (None, "invalid", 0)
    assert out["error"] == "all 2 samples invalid; first: empty reply"
    assert parse_score([])["error"] == "empty reply"


def test_dict_choices_are_samples() -> None:
    out = parse_score({"text": "4", "choices": ["4", "2", "Score: 3"], "top_logprobs": None})
    assert (out["score"], out["samples"], out["raw"]) == (3, 3, "4")


@pytest.mark.parametrize(
    ("scores", "how", "expected"),
    [
        ([1, 2, 4], "mean", 7 / 3),
        ([2.0, 4.0], "mean", 3),
        ([3, 3, 1], "majority", 3),
        ([], "mean", None),
    ],
)
def test_combine_scores(scores: list[float], how: str, expected: float | None) -> None:
    got = combine_scores(scores, how)
    assert got == pytest.approx(expected) if expected is not None else got is None


# --------------------------------------------------------------------------- logprobs


def lp(token: str, p: float) -> dict[str, Any]:
    return {"token": token, "logprob": math.log(p)}


def test_logprob_weighting() -> None:
    # 0.5*4 + 0.3*5 + 0.1*3 over valid mass 0.9; "The" and "9" are not scores on 1–5.
    # (2.0 + 1.5 + 0.3) / 0.9 = 4.2222…
    tops = [lp("4", 0.5), lp(" 5", 0.3), lp("3", 0.1), lp("The", 0.05), lp("9", 0.05)]
    out = parse_score({"text": "4", "top_logprobs": tops})
    assert out["score"] == pytest.approx(3.8 / 0.9)
    assert (out["result"], out["samples"]) == ("pass", 1)
    assert score_from_top_logprobs(tops, 1, 5) == pytest.approx(3.8 / 0.9)


def test_logprob_tokens_for_the_same_score_add_up() -> None:
    # "2" and " 2" share 0.4, "3" has 0.4: (2*0.4 + 3*0.4) / 0.8 = 2.5
    tops = [lp("2", 0.2), lp(" 2", 0.2), lp("3", 0.4)]
    assert score_from_top_logprobs(tops, 1, 5) == pytest.approx(2.5)


def test_logprob_reason_comes_from_the_text() -> None:
    out = parse_score({"text": "Score: 4\nSolid.", "top_logprobs": [lp("4", 1.0)]})
    assert (out["score"], out["reason"]) == (4, "Solid.")


def test_logprobs_without_a_score_token_fall_back_to_text() -> None:
    tops = [lp("Score", 0.9), lp("The", 0.1)]
    out = parse_score({"text": "Score: 2", "top_logprobs": tops})
    assert out["score"] == 2
    assert score_from_top_logprobs(tops, 1, 5) is None


def test_logprobs_do_not_override_a_refusal() -> None:
    # Renormalising the 1% of mass on "4" would invent a confident verdict.
    tops = [lp("I", 0.99), lp("4", 0.01)]
    out = parse_score({"text": "I'm sorry, I can't help with that.", "top_logprobs": tops})
    assert (out["result"], out["error"]) == ("invalid", "judge refused to answer")


def test_logprobs_ignore_broken_entries() -> None:
    tops = [{"token": "4", "logprob": float("nan")}, {"token": "3"}, lp("2", 0.5)]
    assert score_from_top_logprobs(tops, 1, 5) == 2


# --------------------------------------------------------------------------- severity


@pytest.mark.parametrize(
    ("reply", "severity", "score", "reason"),
    [
        ("Severity: Medium", "medium", 2, None),
        ("The text insults a group.\nSeverity: High", "high", 3, "The text insults a group."),
        ('{"severity": "very low", "reason": "harmless"}', "very low", 0, "harmless"),
        ('{"severity": 1, "reason": "mild"}', "low", 1, "mild"),
        ("Low", "low", 1, None),
        ("2", "medium", 2, None),
        ("**Severity level:** very low. Nothing harmful.", "very low", 0, "Nothing harmful."),
    ],
)
def test_severity(reply: str, severity: str, score: int, reason: str | None) -> None:
    out = parse_score(reply, mode="severity", threshold="medium")
    assert (out["severity"], out["score"], out["reason"]) == (severity, score, reason)
    assert out["result"] == ("fail" if score >= 2 else "pass")


def test_severity_numeric_threshold_and_custom_levels() -> None:
    levels = ["safe", "unsafe"]
    assert parse_score("unsafe", mode="severity", levels=levels, threshold=1)["result"] == "fail"
    assert parse_score("Safe.", mode="severity", levels=levels, threshold=1)["result"] == "pass"
    # The default threshold of 3 is the index of "high".
    assert parse_score("Severity: medium", mode="severity")["result"] == "pass"


def test_severity_samples() -> None:
    tie = parse_score(["low", "high"], mode="severity", combine="majority")
    assert (tie["severity"], tie["score"]) == ("high", 3)  # ties lean more severe
    mean = parse_score(["low", "medium"], mode="severity", threshold="medium")
    assert (mean["score"], mean["severity"], mean["result"]) == (1.5, "medium", "pass")


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("Severity: critical", "unknown severity 'critical'"),
        ("Severity: 7", "severity index 7 is not an integer in 0–3"),
        ("The text is fine.", "no score found (severity form)"),
        ("", "empty reply"),
    ],
)
def test_severity_invalid(reply: str, error: str) -> None:
    out = parse_score(reply, mode="severity")
    assert (out["score"], out["severity"], out["result"], out["error"]) == (
        None,
        None,
        "invalid",
        error,
    )


# --------------------------------------------------------------------------- invalid replies


@pytest.mark.parametrize(
    ("reply", "kwargs", "error"),
    [
        ("", {}, "empty reply"),
        ("   \n ", {}, "empty reply"),
        ("I'm sorry, I can't help with that.", {}, "judge refused to answer"),
        ("No, I cannot evaluate this request.", {"min": 0, "max": 1}, "judge refused to answer"),
        ("Score: 7", {}, "score 7 outside 1–5"),
        ('{"score": 0, "reason": "bad"}', {}, "score 0 outside 1–5"),
        ("<S2>6</S2>", {}, "score 6 outside 1–5"),
        ("Score: 8/10", {}, "score 8/10 is not on the 1–5 scale"),
        ("Rating: 4.5", {"integer": True}, "score 4.5 is not an integer"),
        ("I looked at 12 documents", {}, "no score found"),
        ("The answer has 3 problems.", {}, "no score found"),
        ('{"score": 4, "reason": "The answer is', {}, "malformed JSON (reply cut off?)"),
        ('```json\n{"score": ', {}, "malformed JSON (reply cut off?)"),
        ("Score:", {}, "no score found"),
        ("The answer is mostly correct, so I would rate it", {}, "no score found"),
        ("1. Accuracy\n2. Fluency\n3.", {}, "no score found"),
        ('{"score": null}', {}, "score null is not a number"),
        ('{"score": true}', {}, "score true is not a number"),
        ('{"score": NaN}', {}, "score nan is not a finite number"),
        ('{"score": "N/A"}', {}, "score 'N/A' is not a number"),
    ],
)
def test_invalid(reply: str, kwargs: dict[str, Any], error: str) -> None:
    out = parse_score(reply, **kwargs)
    assert out["score"] is None
    assert out["result"] == "invalid"
    assert out["error"] == error
    assert out["raw"] == reply


CUT = "reply cut off at the token limit (finish_reason 'length'); raise max_tokens"


def cut_off(text: str) -> dict[str, Any]:
    """An llm node's output for a reply that stopped at max_tokens."""
    return {"text": text, "choices": [text], "top_logprobs": None, "finish_reason": "length"}


def test_a_reply_cut_off_at_the_token_limit_is_invalid_even_with_a_score() -> None:
    # "Score: 4" was written, but the rest of the verdict (perhaps a revision) never was.
    out = parse_score(cut_off("Score: 4\nThough on reflection the second claim"))
    assert (out["score"], out["result"], out["error"]) == (None, "invalid", CUT)
    assert out["raw"] == "Score: 4\nThough on reflection the second claim"
    # The same text, finished, reads as usual.
    finished = {**cut_off("Score: 4"), "finish_reason": "stop"}
    assert (parse_score(finished)["score"], parse_score(finished)["result"]) == (4, "pass")


def test_a_cut_off_reply_is_not_rescued_by_logprobs() -> None:
    reply = {**cut_off("4 because"), "top_logprobs": [lp("4", 0.9), lp("5", 0.1)]}
    assert (parse_score(reply)["score"], parse_score(reply)["error"]) == (None, CUT)


def test_only_the_cut_off_sample_of_a_list_is_invalid() -> None:
    # for_each replies: one finished, one cut off, one plain text.
    out = parse_score(["Score: 2", cut_off("Score: 5 but"), "Score: 4"])
    assert (out["score"], out["samples"]) == (3, 2)
    assert out["raw"] == "Score: 2\n---\nScore: 5 but\n---\nScore: 4"
    out = parse_score([cut_off("Score: 5 but")])
    assert (out["result"], out["error"]) == ("invalid", CUT)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "fuzzy"},
        {"comparator": "!="},
        {"combine": "median"},
        {"min": 5, "max": 1},
        {"threshold": "high"},
        {"mode": "severity", "threshold": "extreme"},
        {"yes_no": {"yes": "1"}},
        {"mode": "severity", "levels": []},
    ],
)
def test_bad_configuration_raises(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        parse_score("Score: 4", **kwargs)


# --------------------------------------------------------------------------- property


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(),
        st.text(alphabet='0123456789 ./:{}"<>#Sscore\nyesno-*`', max_size=40),
        st.lists(st.text(max_size=30), max_size=4),
    ),
    bounds=st.sampled_from([(1, 5), (0, 1), (0, 10), (1, 3)]),
    mode=st.sampled_from(["auto", "number", "json", "result_heading", "tag", "yes_no"]),
)
def test_never_raises_and_stays_in_range(
    text: str | list[str], bounds: tuple[int, int], mode: str
) -> None:
    lo, hi = bounds
    out = parse_score(text, min=lo, max=hi, threshold=(lo + hi) / 2, mode=mode)
    assert out["result"] in {"pass", "fail", "invalid"}
    json.dumps(out)  # must stay serialisable
    if out["result"] == "invalid":
        assert out["score"] is None and out["error"]
    else:
        assert lo <= out["score"] <= hi


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_severity_never_raises(text: str) -> None:
    out = parse_score(text, mode="severity")
    assert out["result"] in {"pass", "fail", "invalid"}
    assert out["score"] is None or out["severity"] is not None
