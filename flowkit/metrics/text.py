"""Metrics computed in code rather than by a judge: token F1, exact match, the cosine of two
embeddings and per-row token counts.

Normalisation (METRICS.md, section B): lowercase, drop punctuation, drop the articles a/an/the,
collapse whitespace. F1 counts common tokens with multiplicity. Punctuation is ASCII
``string.punctuation``, as in SQuAD's and Prompt Flow's scripts, so scores match theirs.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.keys import returns_keys
from flowkit.metrics.scores import passes

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _answers(ground_truth: Any) -> list[str]:
    """The accepted answers; an empty list or null is a data mistake, not a score of 0."""
    if ground_truth is None:
        raise ValueError("ground_truth is null; give the correct answer or a list of them")
    if isinstance(ground_truth, list | tuple):
        if not ground_truth:
            raise ValueError("ground_truth is an empty list; give at least one accepted answer")
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def token_f1(answer: str, truth: str) -> float:
    pred, gold = normalize(answer).split(), normalize(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@returns_keys(("score", "result"))
def f1_score(answer: str, ground_truth: str | list[str], threshold: float = 0.5) -> dict[str, Any]:
    """Token F1 against the ground truth (the best over a list of accepted answers)."""
    score = max(token_f1(answer, t) for t in _answers(ground_truth))
    return {"score": score, "result": "pass" if score >= threshold else "fail"}


@returns_keys(("score", "result"))
def exact_match(
    answer: str, ground_truth: str | list[str], normalize_text: bool = False
) -> dict[str, Any]:
    """1 when the answer equals any accepted answer (character for character unless normalised)."""
    prep = normalize if normalize_text else str
    hit = any(prep(answer) == prep(t) for t in _answers(ground_truth))
    return {"score": int(hit), "result": "pass" if hit else "fail"}


# --------------------------------------------------------------------------- embeddings


def first_answer(ground_truth: Any) -> str:
    """The text to embed for a ground truth: the first accepted answer when there are several.

    An embedding node takes one text, and averaging vectors of different answers would blur
    them, so a list contributes its first (canonical) entry.
    """
    return _answers(ground_truth)[0]


def cosine(a: Sequence[float], b: Sequence[float]) -> float | None:
    """dot(a, b) / (|a| |b|); None when either vector is all zeros (the angle is undefined).

    fsum keeps long vectors (thousands of dimensions) from drifting past ±1 by rounding.
    """
    if len(a) != len(b):
        raise ValueError(f"vectors differ in length: {len(a)} and {len(b)}")
    if not a:
        raise ValueError("cannot take the cosine of empty vectors")
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norm == 0 or not math.isfinite(norm):
        return None
    return max(-1.0, min(1.0, dot / norm))


@returns_keys(("score", "result", "error"))
def embedding_similarity(
    answer_vector: Sequence[float], truth_vector: Sequence[float], threshold: float = 0.8
) -> dict[str, Any]:
    """Cosine of the two embeddings, with pass when it reaches ``threshold``.

    Cosines depend on the embedding model (ada-002 rarely goes below 0.7, text-embedding-3
    spreads wider), so the default threshold is only a starting point to calibrate.

    The score is documented (as Azure's ada_similarity is) as 0–1: a negative cosine (texts
    pointing apart) is clipped to 0 rather than the whole scale rescaled, so every cosine in
    0–1, which is what embedding models give, stays the number Azure reports.
    """
    score = cosine(answer_vector, truth_vector)
    if score is None:
        return {"score": None, "result": "invalid", "error": "zero-length embedding vector"}
    score = max(0.0, score)
    result = "pass" if passes(score, float(threshold), ">=") else "fail"
    return {"score": score, "result": result, "error": None}


# --------------------------------------------------------------------------- token counts

# Field names used by the common APIs, first match wins: OpenAI (prompt/completion),
# Anthropic and OpenAI Responses (input/output), MLflow/Databricks traces (total_*_count).
_USAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "input": (
        "input_tokens",
        "prompt_tokens",
        "total_input_token_count",
        "input_token_count",
        "prompt_token_count",
    ),
    "output": (
        "output_tokens",
        "completion_tokens",
        "total_output_token_count",
        "output_token_count",
        "candidates_token_count",
    ),
    "total": ("total_tokens", "total_token_count"),
}


def _count(value: Any, name: str) -> int | None:
    """A token count as an int; a malformed one raises so the row shows the data problem."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number of tokens, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{name} must be a whole number of tokens, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number of tokens >= 0, got {value!r}")
    return value


@returns_keys(("input", "output", "total"))
def token_counts(
    usage: Mapping[str, Any] | None = None,
    input_tokens: Any = None,
    output_tokens: Any = None,
    total_tokens: Any = None,
) -> dict[str, int | None]:
    """Total, input and output tokens for one row, from flat fields or a usage object.

    Flat fields win over ``usage``. When two of the three counts are known the third is
    derived (total = input + output); when all three are given they are kept as given,
    because some providers count cached or reasoning tokens in the total only. A count
    that is not reported stays None, so the sums never treat "unknown" as zero.
    """
    if usage is not None and not isinstance(usage, Mapping):
        raise ValueError(f"usage must be an object of token counts, got {type(usage).__name__}")
    reported: Mapping[str, Any] = usage or {}
    given = {"input": input_tokens, "output": output_tokens, "total": total_tokens}
    counts: dict[str, int | None] = {}
    for part, flat in given.items():
        value = _count(flat, f"{part}_tokens")
        if value is None:
            key = next((k for k in _USAGE_FIELDS[part] if k in reported), None)
            value = _count(reported[key], f"usage.{key}") if key else None
        counts[part] = value
    inp, out, total = counts["input"], counts["output"], counts["total"]
    if total is None and inp is not None and out is not None:
        total = inp + out
    elif total is not None and inp is None and out is not None:
        inp = total - out if total >= out else None
    elif total is not None and out is None and inp is not None:
        out = total - inp if total >= inp else None
    return {"total": total, "input": inp, "output": out}
