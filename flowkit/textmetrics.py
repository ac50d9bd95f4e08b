"""Metrics that need no model: token F1 and exact match, with the usual QA normalisation.

Normalisation (METRICS.md, section B): lowercase, drop punctuation, drop the articles a/an/the,
collapse whitespace. F1 counts common tokens with multiplicity.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _answers(ground_truth: Any) -> list[str]:
    if isinstance(ground_truth, list):
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def token_f1(answer: str, truth: str) -> float:
    pred, gold = normalize(answer).split(), normalize(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1_score(answer: str, ground_truth: str | list[str], threshold: float = 0.5) -> dict[str, Any]:
    """Token F1 against the ground truth (the best over a list of accepted answers)."""
    score = max(token_f1(answer, t) for t in _answers(ground_truth))
    return {"score": score, "result": "pass" if score >= threshold else "fail"}


def exact_match(answer: str, ground_truth: str | list[str], normalize_text: bool = False
                ) -> dict[str, Any]:
    """1 when the answer equals any accepted answer (character for character unless normalised)."""
    prep = normalize if normalize_text else str
    hit = any(prep(answer) == prep(t) for t in _answers(ground_truth))
    return {"score": int(hit), "result": "pass" if hit else "fail"}
