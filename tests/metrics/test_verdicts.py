"""Yes/no verdicts read as a person reads them: the reply's first word, past markup and a label;
a verdict position holding both words is invalid, never a pass."""

from __future__ import annotations

import json

import pytest

from flowkit.metrics.judges import parse_intents
from flowkit.metrics.scores import parse_score

YES_NO_MODES = ("yes_no", "contains", "auto")


def read(reply: str, mode: str) -> tuple[object, str, str | None]:
    out = parse_score(reply, min=0, max=1, threshold=1, comparator=">=", mode=mode)
    return out["score"], out["result"], out["error"]


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    "reply",
    [
        "NO. The response says yes to the question, but the context disagrees.",
        "No, yesterday's figures say otherwise; yes, it is close.",
        "**NO** — the response says yes where the context says no.",
    ],
)
def test_a_no_that_mentions_yes_later_is_a_fail(reply: str, mode: str) -> None:
    assert read(reply, mode) == (0, "fail", None)


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("**Yes**\nThe context states it.", 1),
        ('"No" - it contradicts the context.', 0),
        ("`YES`", 1),
        ("# No\nThe date is wrong.", 0),
        ("> Yes. It fits.", 1),
        ("- No, the context lacks it.", 0),
        ("Answer: Yes. The context supports it.", 1),
        ("**Final verdict:** no", 0),
        ("Verdict - YES", 1),
        ("## Verdict\nNo\nThe context never says so.", 0),
        ("<answer>Yes</answer>", 1),
        ("[No] it is off topic", 0),
        ("Decision: no", 0),
    ],
)
def test_the_verdict_is_the_first_word_after_markup_and_a_label(
    reply: str, score: int, mode: str
) -> None:
    assert read(reply, mode) == (score, "pass" if score else "fail", None)


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("Yes/No", "the verdict says both 'yes' and 'no'"),
        ("YES or NO. It is hard to say.", "the verdict says both 'yes' and 'no'"),
        ("**No | Yes**", "the verdict says both 'no' and 'yes'"),
        ("Answer: yes and no", "the verdict says both 'yes' and 'no'"),
    ],
)
def test_both_words_in_the_verdict_position_are_invalid(reply: str, error: str, mode: str) -> None:
    assert read(reply, mode) == (None, "invalid", error)


def test_contains_reads_the_whole_reply_only_when_no_word_opens_it() -> None:
    assert read("The claim is supported: yes.", "contains") == (1, "pass", None)
    assert read("Supported? No.", "contains") == (0, "fail", None)
    assert read("The eyes say nothing.", "contains") == (0, "fail", None)  # whole words only
    assert read("It says yes here and no there.", "contains") == (
        None,
        "invalid",
        "the verdict says both 'yes' and 'no'",
    )


def test_a_mapping_of_other_words_reads_the_same_way() -> None:
    out = parse_score(
        "**Verdict:** FAIL. It would pass elsewhere.",
        min=0,
        max=1,
        threshold=1,
        comparator=">=",
        mode="yes_no",
        yes_no={"pass": 1, "fail": 0},
    )
    assert (out["score"], out["result"], out["reason"]) == (0, "fail", "It would pass elsewhere.")


def test_an_intent_answered_with_both_words_is_invalid() -> None:
    reply = json.dumps({"intents": [{"intent": "hours", "answered": "Yes/No, documents [d1]"}]})
    out = parse_intents(reply)
    assert (out["score"], out["result"], out["error"]) == (
        None,
        "invalid",
        "intent 1: verdict 'Yes/No, documents [d1]' is not yes or no",
    )
