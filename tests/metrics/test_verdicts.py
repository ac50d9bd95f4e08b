"""Yes/no verdicts read as a person reads them: the reply's first word, past markup and a label;
a verdict position holding both words is invalid, never a pass."""

from __future__ import annotations

import json

import pytest

from flowkit.metrics.judges import chunk_precision, parse_intents
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


# Any run of non-word characters short of a full stop or "!" (dashes of every kind, slashes of
# every width, brackets, "?", any Unicode space or line break) and perhaps a connector word.
JOINED = [
    "Yes-No",
    "Yes–No",
    "Yes — No",
    "YES vs NO",
    "YES vs. NO",
    "Yes\u00a0/\u00a0No",
    "Yes／No",
    "Yes\n/\nNo",
    "Yes\nNo",
    "Yes, or no.",
    "Yes, No",
    "YES (or NO)",
    "Yes (No)",
    "Yes? No.",
    "Yes\u2003versus\u2003no",
    "yes nor no",
    "Yes and no. It is hard to say.",
    "Yes / no issues found.",  # a slash offers alternatives whatever follows
]


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize("reply", JOINED)
def test_verdict_words_joined_by_any_mark_or_connector_are_invalid(reply: str, mode: str) -> None:
    assert read(reply, mode) == (None, "invalid", "the verdict says both 'yes' and 'no'")


@pytest.mark.parametrize("mode", YES_NO_MODES)
def test_the_joined_form_reads_the_same_with_the_no_first(mode: str) -> None:
    assert read("NO – YES", mode) == (None, "invalid", "the verdict says both 'no' and 'yes'")


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Yes. No harm found.", 1),
        ("No! Yes is wrong", 0),
        ("Yes, no issues found.", 1),
        ("Yes - no problems with it.", 1),
        ("Yes, and no other issues.", 1),
        ("Yes; no issues found.", 1),
        ("Yes\nNo issues were found.", 1),
        ("No. Yes would overstate it.", 0),
    ],
)
def test_a_stop_or_ordinary_words_after_the_second_word_end_the_verdict(
    reply: str, score: int, mode: str
) -> None:
    assert read(reply, mode) == (score, "pass" if score else "fail", None)


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("No doubt, yes.", 1),
        ("No-brainer: yes", 1),
        ("No question about it: yes", 1),
        ("Answer: no doubt, no.", 0),
        ("Yes - no doubt.", 1),
    ],
)
def test_idioms_that_open_with_no_are_not_a_no(reply: str, score: int, mode: str) -> None:
    assert read(reply, mode) == (score, "pass" if score else "fail", None)


def test_an_idiom_alone_is_no_verdict() -> None:
    assert read("No doubt.", "yes_no") == (None, "invalid", "no score found (yes_no form)")
    assert read("The answer is yes, no doubt.", "contains") == (1, "pass", None)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("PASS – FAIL", "the verdict says both 'pass' and 'fail'"),
        ("Fail? Pass.", "the verdict says both 'fail' and 'pass'"),
        ("**Verdict:** pass (or fail)", "the verdict says both 'pass' and 'fail'"),
    ],
)
def test_other_verdict_words_joined_are_invalid(reply: str, error: str) -> None:
    out = parse_score(
        reply,
        min=0,
        max=1,
        threshold=1,
        comparator=">=",
        mode="yes_no",
        yes_no={"pass": 1, "fail": 0},
    )
    assert (out["score"], out["result"], out["error"]) == (None, "invalid", error)


@pytest.mark.parametrize("joined", ["Yes–No", "YES vs NO", "Yes? No.", "Yes (or no)"])
def test_an_intent_answered_with_joined_words_is_invalid(joined: str) -> None:
    value = f"{joined}, documents [d1]"
    out = parse_intents(json.dumps({"intents": [{"intent": "hours", "answered": value}]}))
    assert (out["score"], out["error"]) == (None, f"intent 1: verdict {value!r} is not yes or no")


def test_an_intent_read_past_an_idiom_keeps_its_documents() -> None:
    value = "No doubt, yes: documents [d1], [d2]"
    out = parse_intents(json.dumps({"intents": [{"intent": "hours", "answered": value}]}))
    assert out["intents"] == [{"intent": "hours", "answered": True, "doc_ids": ["d1", "d2"]}]


def test_a_chunk_judged_with_joined_words_is_invalid() -> None:
    out = chunk_precision(["Yes", "Yes\u00a0—\u00a0No"])
    assert (out["score"], out["result"], out["error"]) == (
        None,
        "invalid",
        "chunk 2: the verdict says both 'yes' and 'no'",
    )
    assert chunk_precision(["Yes", "No-brainer: yes"])["score"] == 1
