"""Databricks' guideline adherence and overall assessment.

``guideline_adherence``: each guideline a row carries is judged pass/fail, in a call of its own,
with a rationale; the row passes when every guideline passes. Guidelines are a list of strings
or a dict of named lists (``{"tone": ["Be polite."], "scope": [...]}``); named ones also get a
verdict per name. ``overall_assessment``: a row passes when every judge that ran on it passed;
the first judge that failed is the row's root cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowkit.metrics.aggregate import Metrics, score_summary
from flowkit.metrics.keys import returns_keys
from flowkit.metrics.scores import parse_score

OVERALL_NAME = "response/overall_assessment/rating/percentage"
"""Databricks' name for the share of rows whose overall assessment is yes."""
OVERALL_KEYS = ("overall_assessment.rate", "overall_assessment.count", "overall_assessment.invalid")
_INVALID = {"score": None, "result": "invalid", "reason": None}


def _named(guidelines: Any) -> list[tuple[str | None, str]]:
    """(name, guideline) pairs; the name is None for a plain list."""
    if isinstance(guidelines, str):
        return [(None, guidelines)]
    if isinstance(guidelines, dict):
        pairs: list[tuple[str | None, str]] = []
        for name, group in guidelines.items():
            for text in [group] if isinstance(group, str) else _texts(group, f"guidelines.{name}"):
                pairs.append((str(name), text))
        return pairs
    return [(None, text) for text in _texts(guidelines, "guidelines")]


def _texts(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"{where} must be a list of strings or a dict of named lists of strings, "
            f"got {type(value).__name__}"
        )
    return value


def guideline_list(guidelines: Any) -> list[str]:
    """Every guideline of the row, in order, one judge call each (``for_each``)."""
    return [text for _, text in _named(guidelines)]


@returns_keys(("score", "result", "reason", "raw", "guidelines", "by_name", "error"))
def adherence(verdicts: list[Any] | None, guidelines: Any) -> dict[str, Any]:
    """Read one yes/no reply per guideline: score 1 when every guideline passed, else 0.

    ``guidelines`` in the output keeps each guideline's verdict and rationale; ``by_name`` (for
    named guidelines) says "yes"/"no" per name. A reply that cannot be read makes the row
    invalid, as a verdict on the rest could overstate it; so does a row with no guidelines.
    """
    pairs = _named(guidelines)
    replies = list(verdicts or [])
    raw = "\n---\n".join(str(r) for r in replies)
    base: dict[str, Any] = {"raw": raw, "guidelines": [], "by_name": None, "error": None}
    if not pairs:
        return {**base, **_INVALID, "error": "no guidelines to judge"}
    judged = []
    for i, ((name, text), reply) in enumerate(zip(pairs, replies, strict=True), start=1):
        read = parse_score(reply, min=0, max=1, threshold=1, comparator=">=", mode="yes_no")
        if read["score"] is None:
            return {**base, **_INVALID, "error": f"guideline {i}: {read['error']}"}
        entry = {"guideline": text, "pass": read["score"] == 1, "rationale": read.get("reason")}
        judged.append({"name": name, **entry} if name is not None else entry)
    failed = [g for g in judged if not g["pass"]]
    by_name: dict[str, str] | None = None
    if any(name is not None for name, _ in pairs):
        by_name = {}
        for g in judged:
            by_name[g["name"]] = "no" if by_name.get(g["name"]) == "no" or not g["pass"] else "yes"
    notes = "; ".join(
        f"not followed: {g['guideline']!r}" + (f" ({g['rationale']})" if g["rationale"] else "")
        for g in failed
    )
    reason = f"{len(judged) - len(failed)} of {len(judged)} guidelines followed"
    return {
        **base,
        "score": 0 if failed else 1,
        "result": "fail" if failed else "pass",
        "reason": f"{reason}; {notes}" if notes else reason,
        "guidelines": judged,
        "by_name": by_name,
    }


@returns_keys(("score", "result", "reason", "overall_assessment", "root_cause"))
def overall_assessment(**results: Any) -> dict[str, Any]:
    """A row's overall assessment from each judge's ``result`` (None: the judge did not run).

    "yes" when every judge that ran passed; "no" when one failed, and the first such judge (in
    the order given) is the ``root_cause``; invalid when none failed but one could not be read,
    or when no judge ran.
    """
    ran = {judge: result for judge, result in results.items() if result is not None}
    failed = [judge for judge, result in ran.items() if result == "fail"]
    unread = [judge for judge, result in ran.items() if result not in ("pass", "fail")]
    if failed:
        score, assessment, reason = 0, "no", "failed: " + ", ".join(failed)
    elif unread or not ran:
        score, assessment = None, None
        reason = "unreadable: " + ", ".join(unread) if unread else "no judge ran"
    else:
        score, assessment, reason = 1, "yes", "passed: " + ", ".join(ran)
    return {
        "score": score,
        "result": "invalid" if score is None else "pass" if score == 1 else "fail",
        "overall_assessment": assessment,
        "root_cause": failed[0] if failed else None,
        "reason": reason,
    }


@returns_keys((*OVERALL_KEYS, OVERALL_NAME))
def overall_summary(scores: Sequence[Any]) -> Metrics:
    """The share of rows assessed "yes" overall, also under Databricks' name."""
    summary = score_summary(scores, 1, ">=")
    rate, count, invalid = OVERALL_KEYS
    return {
        rate: summary["mean"],
        count: summary["count"],
        invalid: summary["invalid"],
        OVERALL_NAME: summary["mean"],
    }
