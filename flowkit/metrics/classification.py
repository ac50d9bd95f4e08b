"""Classification accuracy: a prediction against its ground-truth label, per row and per class.

Labels are compared case-insensitively, as Prompt Flow's classification-accuracy evaluation does;
surrounding whitespace is also ignored, since a trailing newline from a model is not a different
class. Per-class counts and macro F1 (the unweighted mean of the per-class F1 over every class
seen in either column) show what accuracy alone hides on unbalanced data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from flowkit.metrics.aggregate import Metrics
from flowkit.metrics.keys import returns_keys
from flowkit.metrics.names import _safe_keys, key_of


def _label(value: Any) -> str:
    return "" if value is None else str(value).strip().lower()


@returns_keys(("score", "result", "label", "prediction"))
def grade(prediction: Any, ground_truth: Any) -> dict[str, Any]:
    """``{score: 1|0, result: pass|fail, prediction, label}`` for one row (labels normalised)."""
    predicted, label = _label(prediction), _label(ground_truth)
    if not label:
        raise ValueError("ground_truth is empty: there is no label to compare with")
    correct = predicted == label
    return {
        "score": int(correct),
        "result": "pass" if correct else "fail",
        "prediction": predicted,
        "label": label,
    }


def summary(predictions: Sequence[Any], labels: Sequence[Any]) -> Metrics:
    """Accuracy, macro F1, and per class: support, predicted, correct, precision, recall, F1."""
    pairs = [(_label(p), _label(t)) for p, t in zip(predictions, labels, strict=True)]
    if not pairs:
        return {"accuracy": None, "macro_f1": None, "count": 0}
    support = Counter(t for _, t in pairs)
    predicted = Counter(p for p, _ in pairs)
    correct = Counter(t for p, t in pairs if p == t)
    out: Metrics = {"accuracy": sum(correct.values()) / len(pairs), "count": len(pairs)}
    f1s = []
    keys = _safe_keys(set(support) | set(predicted))
    for cls in sorted(set(support) | set(predicted)):
        precision = correct[cls] / predicted[cls] if predicted[cls] else 0.0
        recall = correct[cls] / support[cls] if support[cls] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        f1s.append(f1)
        key = f"class.{key_of(keys, cls)}"
        out[f"{key}.support"] = support[cls]
        out[f"{key}.predicted"] = predicted[cls]
        out[f"{key}.correct"] = correct[cls]
        out[f"{key}.precision"] = precision
        out[f"{key}.recall"] = recall
        out[f"{key}.f1"] = f1
    out["macro_f1"] = sum(f1s) / len(f1s)
    return out
