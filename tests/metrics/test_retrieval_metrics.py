"""Document recall/precision, cosine and token counts against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from flowkit.metrics.retrieval import document_recall, document_summary
from flowkit.metrics.text import cosine, embedding_similarity, first_answer, token_counts


def docs(*uris: str) -> list[dict[str, str]]:
    return [{"content": f"text of {u}", "doc_uri": u} for u in uris]


# --------------------------------------------------------------------------- document recall


def test_recall_counts_distinct_expected_documents() -> None:
    # Expected {a, b}; retrieved a, a, c: one of two expected found → 1/2, however often a came.
    out = document_recall(docs("a", "a", "c"), docs("a", "b"))
    assert out["recall"] == out["score"] == 0.5
    assert out["found"] == ["a"] and out["missing"] == ["b"]
    assert out["result"] == "fail"  # default threshold 1: every expected document found


def test_precision_counts_retrieval_slots() -> None:
    # Retrieved a, a, c against expected {a, b}: slots 1 and 2 are relevant, slot 3 is not → 2/3.
    out = document_recall(docs("a", "a", "c"), docs("a", "b"))
    assert out["precision"] == pytest.approx(2 / 3)
    assert out["ratings"] == [1, 1, 0]


def test_all_found_passes_and_threshold_is_configurable() -> None:
    full = document_recall(docs("b", "a", "x", "y"), docs("a", "b"))
    assert (full["recall"], full["precision"], full["result"]) == (1.0, 0.5, "pass")
    half = document_recall(docs("a"), docs("a", "b"), threshold=0.5)
    assert (half["recall"], half["result"]) == (0.5, "pass")


def test_duplicate_expected_uris_count_once() -> None:
    out = document_recall(docs("a"), docs("a", "a", "b"))
    assert out["recall"] == 0.5


def test_nothing_retrieved_has_zero_recall_and_no_precision() -> None:
    out = document_recall([], docs("a"))
    assert out["recall"] == 0.0 and out["precision"] is None and out["result"] == "fail"


def test_nothing_expected_is_invalid_not_perfect() -> None:
    out = document_recall(docs("a"), [])
    assert out["recall"] is None and out["result"] == "invalid"
    assert out["precision"] == 0.0


def test_plain_uri_strings_are_accepted() -> None:
    assert document_recall(["a", "b"], ["b"])["recall"] == 1.0


@pytest.mark.parametrize(
    ("retrieved", "message"),
    [
        ([{"content": "no uri"}], r"retrieved_context\[0\] has no 'doc_uri' \(its keys: content\)"),
        ({"doc_uri": "a"}, "must be a list"),
        ([3], r"retrieved_context\[0\] must be a"),
    ],
)
def test_malformed_context_names_the_problem(retrieved: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        document_recall(retrieved, docs("a"))  # type: ignore[arg-type]


def test_summary_reports_recall_and_precision_under_distinct_keys() -> None:
    # Recall 1, 0.5, 0, invalid; precision 2/3, 2/3, 0, None (worked out as in the rows above).
    out = document_summary([1.0, 0.5, 0.0, None], [2 / 3, 2 / 3, 0.0, None], threshold=1)
    assert out["mean"] == pytest.approx(0.5)
    assert out["pass_rate"] == pytest.approx(1 / 3)
    assert (out["count"], out["invalid"]) == (3, 1)
    assert out["document_precision.mean"] == pytest.approx(4 / 9)
    assert out["document_precision.count"] == 3


# --------------------------------------------------------------------------- cosine


def test_cosine_by_hand() -> None:
    # (1,2,2)·(2,0,1) = 4; |a| = 3, |b| = √5 → 4 / (3√5).
    assert cosine([1, 2, 2], [2, 0, 1]) == pytest.approx(4 / (3 * math.sqrt(5)))
    assert cosine([1, 0], [0, 3]) == 0.0
    assert cosine([1, 1], [-2, -2]) == pytest.approx(-1.0)
    assert cosine([0.3, 0.4], [3, 4]) == pytest.approx(1.0)


def test_cosine_of_a_zero_vector_is_undefined() -> None:
    assert cosine([0, 0], [1, 2]) is None
    out = embedding_similarity([0, 0], [1, 2])
    assert out["score"] is None and out["result"] == "invalid"


def test_cosine_rejects_mismatched_vectors() -> None:
    with pytest.raises(ValueError, match="differ in length: 2 and 3"):
        cosine([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        cosine([], [])


def test_embedding_similarity_threshold() -> None:
    assert embedding_similarity([1, 0], [1, 0])["result"] == "pass"
    assert embedding_similarity([1, 0], [1, 1], threshold=0.8)["result"] == "fail"  # 0.707
    assert embedding_similarity([1, 0], [1, 1], threshold=0.7)["result"] == "pass"


def test_embedding_similarity_stays_in_its_documented_0_to_1() -> None:
    assert cosine([1, 0], [-1, 1]) < 0
    assert embedding_similarity([1, 0], [-1, 1])["score"] == 0.0  # clipped, not rescaled
    assert embedding_similarity([1, 0], [1, 1])["score"] == cosine([1, 0], [1, 1])


def test_first_answer_of_a_list() -> None:
    assert first_answer(["carbon dioxide", "CO2"]) == "carbon dioxide"
    assert first_answer("Paris") == "Paris"
    with pytest.raises(ValueError, match="empty list"):
        first_answer([])


# --------------------------------------------------------------------------- token counts


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}, (150, 120, 30)),
        (
            {"usage": {"prompt_tokens": 200, "completion_tokens": 50, "total_tokens": 250}},
            (250, 200, 50),
        ),
        ({"usage": {"input_tokens": 80, "output_tokens": 20}}, (100, 80, 20)),
        ({"input_tokens": 45, "total_tokens": 60}, (60, 45, 15)),
        ({"output_tokens": "7", "total_tokens": 10.0}, (10, 3, 7)),
        (
            {
                "usage": {
                    "total_token_count": 9,
                    "total_input_token_count": 4,
                    "total_output_token_count": 5,
                }
            },
            (9, 4, 5),
        ),
        ({"total_tokens": 99}, (99, None, None)),
        ({}, (None, None, None)),
        # Flat fields win over the usage object; a total that differs from in+out is kept.
        (
            {
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                "input_tokens": 10,
                "total_tokens": 30,
            },
            (30, 10, 1),
        ),
    ],
)
def test_token_counts(kwargs: dict[str, object], expected: tuple[object, ...]) -> None:
    out = token_counts(**kwargs)  # type: ignore[arg-type]
    assert (out["total"], out["input"], out["output"]) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_tokens": -1}, "input_tokens must be a whole number of tokens >= 0"),
        ({"output_tokens": 2.5}, "output_tokens"),
        ({"total_tokens": True}, "total_tokens"),
        ({"usage": {"prompt_tokens": "many"}}, "usage.prompt_tokens"),
        ({"usage": [1, 2]}, "usage must be an object"),
    ],
)
def test_bad_token_counts_raise(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        token_counts(**kwargs)  # type: ignore[arg-type]
