"""Retrieval metrics against a labelled set of expected documents: recall and precision.

Rows carry ``retrieved_context`` and ``expected_retrieved_context`` as arrays of
``{content, doc_uri}`` (the Databricks agent-evaluation schema); documents are identified by
``doc_uri`` alone, because the same document is often retrieved as different chunks whose
``content`` differs.

* recall counts *distinct* documents: the share of expected doc_uris found among the
  retrieved ones. Retrieving one expected document twice does not make up for a missing one.
* precision counts retrieval *slots*: the share of retrieved entries whose doc_uri is
  expected. A duplicate chunk of a relevant document is still a useful slot, an irrelevant
  one is a wasted slot, so both count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.aggregate import SCORE_SUMMARY_KEYS, Metrics, mean_of, score_summary
from flowkit.metrics.keys import returns_keys
from flowkit.metrics.scores import passes


def _doc_uris(items: Any, name: str) -> list[str]:
    """The doc_uris of a context array, in order; a malformed entry raises and names itself.

    A bare string entry is taken as a doc_uri, so a plain list of ids works too.
    """
    if items is None:
        return []
    if isinstance(items, str | Mapping):
        raise ValueError(
            f"{name} must be a list of {{content, doc_uri}} objects, "
            f"got a single {type(items).__name__}"
        )
    uris: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            uri: Any = item
        elif isinstance(item, Mapping):
            uri = item.get("doc_uri")
            if uri is None:
                keys = ", ".join(map(str, item)) or "none"
                raise ValueError(f"{name}[{i}] has no 'doc_uri' (its keys: {keys})")
        else:
            raise ValueError(
                f"{name}[{i}] must be a {{content, doc_uri}} object, got {type(item).__name__}"
            )
        uris.append(str(uri).strip())
    return uris


@returns_keys(("score", "result", "recall", "precision", "found", "missing", "ratings"))
def document_recall(
    retrieved_context: Sequence[Any] | None,
    expected_retrieved_context: Sequence[Any] | None,
    threshold: float = 1.0,
) -> dict[str, Any]:
    """Recall and precision of the retrieved documents for one row.

    Recall is undefined (None, result "invalid") when no document is expected: there is
    nothing to find, and scoring it 1 or 0 would bias the mean. Precision is None when
    nothing was retrieved, for the same reason; such a row still has a recall of 0.
    """
    retrieved = _doc_uris(retrieved_context, "retrieved_context")
    expected = list(
        dict.fromkeys(_doc_uris(expected_retrieved_context, "expected_retrieved_context"))
    )
    wanted, got = set(expected), set(retrieved)
    ratings = [int(uri in wanted) for uri in retrieved]
    recall = len(wanted & got) / len(wanted) if wanted else None
    precision = sum(ratings) / len(ratings) if ratings else None
    if recall is None:
        result = "invalid"
    else:
        result = "pass" if passes(recall, float(threshold), ">=") else "fail"
    return {
        "score": recall,
        "result": result,
        "recall": recall,
        "precision": precision,
        "ratings": ratings,
        "found": [uri for uri in expected if uri in got],
        "missing": [uri for uri in expected if uri not in got],
    }


RECALL_NAME = "retrieval/ground_truth/document_recall/average"
"""Databricks' name for the mean recall (rows without both lists are not counted there either)."""


@returns_keys(
    (*SCORE_SUMMARY_KEYS, "document_precision.mean", "document_precision.count", RECALL_NAME)
)
def document_summary(
    recall: Sequence[Any], precision: Sequence[Any], threshold: Any = 1.0
) -> Metrics:
    """The recall summary (mean, pass_rate, invalid, count) plus mean document precision.

    One function, because every aggregate node of a flow reports under the flow's name and
    two nodes both returning ``mean`` would overwrite each other.
    """
    out = score_summary(recall, threshold, ">=")
    precision_stats = mean_of(precision)
    out["document_precision.mean"] = precision_stats["mean"]
    out["document_precision.count"] = precision_stats["count"]
    out[RECALL_NAME] = out["mean"]
    return out
