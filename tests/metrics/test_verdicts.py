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


# --------------------------------------------------------------------------- the scale

OFF_SCALE = "a yes/no reply on a {} scale (yes_no maps yes to 1 and no to 0)"


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize("reply", ["Yes", "No", "Yes, every claim is supported.", "No."])
@pytest.mark.parametrize("bounds", [(1, 5), (0, 5), (0, 10)])
def test_the_default_yes_no_words_are_no_score_off_a_0_to_1_scale(
    reply: str, mode: str, bounds: tuple[int, int]
) -> None:
    # "Yes" is not the worst score of 1–5 (nor a failing 1 of 0–5): a person reads no number.
    lo, hi = bounds
    out = parse_score(reply, min=lo, max=hi, mode=mode)
    assert (out["score"], out["result"], out["error"]) == (
        None,
        "invalid",
        OFF_SCALE.format(f"{lo}–{hi}"),
    )
    # A mapping of the node's own says what the words are worth on its scale.
    own = parse_score(reply, min=lo, max=hi, mode=mode, yes_no={"yes": hi, "no": lo})
    assert own["score"] == (hi if reply.startswith("Yes") else lo)


@pytest.mark.parametrize(
    ("reply", "score"),
    [("Yes. 5", 5), ("No. 2", 2), ("Yes, 4", 4), ("Yes - 4\nEvery claim holds.", 4)],
)
def test_a_number_right_after_a_verdict_on_a_numeric_scale_is_the_score(
    reply: str, score: int
) -> None:
    out = parse_score(reply, min=1, max=5)
    assert (out["score"], out["error"]) == (score, None)


def test_a_number_that_begins_a_sentence_after_the_verdict_is_not_the_score() -> None:
    out = parse_score("Yes. 5 claims are supported.", min=1, max=5)
    assert (out["score"], out["error"]) == (None, OFF_SCALE.format("1–5"))


def test_a_verdict_off_its_scale_is_not_rescued_by_logprobs() -> None:
    reply = {"text": "Yes", "top_logprobs": [{"token": "5", "logprob": -4.0}]}
    out = parse_score(reply, min=1, max=5)
    assert (out["score"], out["error"]) == (None, OFF_SCALE.format("1–5"))


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("mode", ["yes_no", "auto"])
def test_a_refusal_is_a_reply_with_no_verdict_first(mode: str) -> None:
    # An apology after the verdict is manners, not a refusal: only a "no" was ever dropped as
    # one, which raised pass rates.
    for reply, score in [
        ("No, sorry, the answer is about bananas, not the question.", 0),
        ("No. I am sorry to say the answer is wrong.", 0),
        ("No. Sorry: the context never says so.", 0),
        ("Yes, sorry for the confusion: it fits the context.", 1),
    ]:
        assert read(reply, mode) == (score, "pass" if score else "fail", None), reply
    # A reply that apologises first, or declines the task after its "no", still refuses.
    for reply in [
        "I'm sorry, but no.",
        "No, I cannot evaluate this request.",
        "No. Sorry, I can't help with that.",
    ]:
        assert read(reply, mode) == (None, "invalid", "judge refused to answer"), reply


# --------------------------------------------------------------------------- checklists


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("- [ ] Yes\n- [x] No", 0),
        ("[ ] Yes [x] No", 0),
        ("- [X] Yes\n- [ ] No", 1),
        ("Answer:\n- [ ] Yes\n- [x] No\nThe context disagrees.", 0),
        ("☐ Yes ☑ No", 0),
        ("☐ Yes ✅ No", 0),
    ],
)
def test_a_checklist_is_read_by_its_checked_box(reply: str, score: int, mode: str) -> None:
    assert read(reply, mode) == (score, "pass" if score else "fail", None)


@pytest.mark.parametrize("mode", YES_NO_MODES)
@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("- [ ] Yes\n- [ ] No", "the checklist checks no verdict"),
        ("[x] Yes [x] No", "the verdict says both 'yes' and 'no'"),
    ],
)
def test_a_checklist_with_no_box_or_both_boxes_checked_is_invalid(
    reply: str, error: str, mode: str
) -> None:
    assert read(reply, mode) == (None, "invalid", error)


# --------------------------------------------------------------------------- "no" + noun

DETERMINERS = [
    "No problem here, yes.",
    "No issues found. The response follows the guideline.",
    "No harmful content was found; the response is safe.",
    "NO hallucinations",
]
CARRIES_ON = [
    "No it is not supported",
    "No the context disagrees",
    "No because the context disagrees",
    "No not at all",
    "No there is no such claim",
    "No I do not think so",
    "No\nIssues: the date is wrong.",
]


def test_no_before_a_noun_is_a_determiner_not_a_verdict() -> None:
    for reply in DETERMINERS:
        assert read(reply, "yes_no") == (None, "invalid", "no score found (yes_no form)"), reply
        assert read(reply, "auto") == (None, "invalid", "no score found"), reply
    # A "no" before a word that carries the sentence on is the verdict.
    for reply in CARRIES_ON:
        assert read(reply, "yes_no") == (0, "fail", None), reply
        assert read(reply, "contains") == (0, "fail", None), reply


def test_contains_reads_a_determiner_reply_by_its_other_words() -> None:
    # "No problem here, yes." holds one verdict word, "yes"; the others hold none (Spring: a no).
    scores = [read(reply, "contains")[:2] for reply in DETERMINERS]
    assert scores == [(1, "pass"), (0, "fail"), (0, "fail"), (0, "fail")]


# --------------------------------------------------------------------------- mixed


@pytest.mark.parametrize("mode", YES_NO_MODES)
def test_a_but_or_an_ellipsis_between_the_words_is_mixed(mode: str) -> None:
    both = "the verdict says both {!r} and {!r}"
    for reply in ["Yes, but also no.", "Yes but no, partially", "Yes... no", "Yes… no.", "YES…NO"]:
        assert read(reply, mode) == (None, "invalid", both.format("yes", "no")), reply
    assert read("No, but yes.", mode) == (None, "invalid", both.format("no", "yes"))
    # As after "and", a "no" with words after it on its line is no second verdict.
    for reply in ["Yes, but no sources are cited.", "Yes... no issues found."]:
        assert read(reply, mode) == (1, "pass", None), reply
