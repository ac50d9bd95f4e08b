"""Built-in aggregate functions: turn per-row values into a flat dict of run-level metrics.

An ``aggregate`` node runs once after all rows. For every input that references a per-row
value it receives a list over the included rows (lists of one call are aligned row by row);
literal inputs arrive as written. A flow input such as ``${inputs.threshold}`` is per-row
too, so every threshold-like parameter here accepts a scalar *or* a per-row list.

Conventions shared by all functions (see METRICS.md):

* ``None`` in a value list is an *invalid* judge answer. Invalid rows are left out of every
  mean and every rate's denominator, and the number of them is always reported as
  ``invalid`` so that leaving them out never hides them.
* Undefined numbers (the mean of nothing, a rate over zero valid rows) are ``None``, never
  NaN, so the result stays strict JSON. For the same reason NaN and infinite inputs count
  as invalid rather than poisoning a mean.
* Keys are bare metric names; the engine prefixes them with the flow's name.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.keys import PER_ROW, returns_keys
from flowkit.metrics.names import _safe_key, _safe_keys, key_of
from flowkit.metrics.scores import COMPARATORS, passes
from flowkit.metrics.severity import DEFAULT_LEVELS as DEFAULT_LEVELS  # public here since 0.1
from flowkit.metrics.severity import _check_levels, _severity_index, _threshold_level

Number = int | float
Metrics = dict[str, Any]


_PASS_WORDS = {"pass": True, "fail": False}
_BINARY: dict[float, bool] = {1: True, 0: False}
_YES_WORDS = {"1": True, "yes": True, "true": True, "0": False, "no": False, "false": False}


# --------------------------------------------------------------------------- shared helpers


def compare(a: Any, op: str, b: Any) -> bool:
    """Apply comparator ``op``: the same rule (and tolerance) as each row's own pass/fail, so
    a pass rate always counts exactly the rows marked 'pass'."""
    if not isinstance(op, str) or op not in COMPARATORS:
        raise ValueError(
            f"unknown comparator {op!r}; valid comparators are {', '.join(COMPARATORS)}"
        )
    return passes(a, b, op)


def _broadcast(threshold: Any, n: int) -> list[Any]:
    """Return one threshold per row.

    A threshold that comes from a flow input arrives as a per-row list, while a literal in
    the YAML arrives as a scalar; callers should not have to care which.
    """
    if isinstance(threshold, (list, tuple)):
        if len(threshold) != n:
            raise ValueError(
                f"per-row threshold list has {len(threshold)} items but there are {n} rows"
            )
        return list(threshold)
    return [threshold] * n


def _rows(values: Any, name: str = "values") -> list[Any]:
    """Check that a per-row argument really is a list, so a mis-wired literal fails loudly."""
    if isinstance(values, (list, tuple)):
        return list(values)
    raise TypeError(f"{name} must be a list with one item per row, got {type(values).__name__}")


def _as_number(value: Any) -> Number | None:
    """Coerce one value to a finite number, or None when it is not one (an invalid row).

    Numeric strings are accepted because values read from CSV/JSONL data are often text.
    Ints stay ints so counts and token sums do not turn into floats.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _numbers(values: Sequence[Any]) -> tuple[list[Number], int]:
    """Split a value list into its valid numbers and the count of invalid entries."""
    valid = [n for n in (_as_number(v) for v in values) if n is not None]
    return valid, len(values) - len(valid)


def _ratio(part: int, whole: int) -> float | None:
    """``part / whole``, or None when there is nothing to divide by."""
    return part / whole if whole else None


def _check_comparators(comparator: Any, n: int) -> list[str]:
    """Broadcast and validate comparators up front, so a typo fails even with zero rows."""
    ops = _broadcast(comparator, n)
    for op in ops if isinstance(comparator, (list, tuple)) else [comparator]:
        compare(0, op, 0)
    return ops


def _threshold_number(threshold: Any, row: int) -> Number:
    """A numeric threshold for one row; a missing one is a flow mistake, not an invalid row."""
    number = _as_number(threshold)
    if number is None:
        raise ValueError(f"row {row}: threshold {threshold!r} is not a number")
    return number


# ----------------------------------------------------------------------- numeric summaries


@returns_keys(("mean", "count", "invalid", "min", "max", "stdev"))
def mean(values: Sequence[Any]) -> Metrics:
    """Mean, spread and range of numeric scores; ``None`` entries are counted as invalid."""
    valid, invalid = _numbers(_rows(values))
    return {
        "mean": statistics.fmean(valid) if valid else None,
        "count": len(valid),
        "invalid": invalid,
        "min": min(valid) if valid else None,
        "max": max(valid) if valid else None,
        "stdev": statistics.stdev(valid) if len(valid) >= 2 else None,
    }


@returns_keys(("mean", "count"))
def mean_of(values: Sequence[Any]) -> Metrics:
    """Plain mean of per-row floats such as chunk precision, where None means "not measured"."""
    valid, _ = _numbers(_rows(values))
    return {"mean": statistics.fmean(valid) if valid else None, "count": len(valid)}


@returns_keys(lambda columns: [f"{k}.{s}" for k in columns for s in ("sum", "mean")])
def sums(**columns: Sequence[Any]) -> Metrics:
    """Total and per-row mean of each keyword column, e.g. token counts.

    Rows with None are skipped. A column with no numbers at all reports a sum of None, not
    0: "the provider reported no usage" must not read as "the run cost nothing".
    """
    out: Metrics = {}
    for key, column in columns.items():
        valid, _ = _numbers(_rows(column, key))
        out[f"{key}.sum"] = sum(valid) if valid else None
        out[f"{key}.mean"] = statistics.fmean(valid) if valid else None
    return out


AGENT_NAMES = {
    "total": "agent/total_token_count/average",
    "input": "agent/total_input_token_count/average",
    "output": "agent/total_output_token_count/average",
    "latency_seconds": "agent/latency_seconds/average",
}
"""Column → Databricks' name for its per-row mean."""

FORMER_AGENT_NAMES = {f"agent.{k}.mean": v for k, v in AGENT_NAMES.items()}
"""The names flowkit 0.1.0 also gave those means (``agent.latency_seconds.mean``), which a gate
still reads as the Databricks name, so a CI gate written then keeps working."""


def _agent_keys(columns: Mapping[str, Any]) -> list[str]:
    return [
        *(f"{k}.sum" for k in columns),
        *(AGENT_NAMES.get(k, f"{k}.mean") for k in columns),
    ]


@returns_keys(_agent_keys)
def agent_sums(**columns: Sequence[Any]) -> Metrics:
    """``sums``, each mean under Databricks' name (``agent/latency_seconds/average``) only:
    one name per value."""
    out = sums(**columns)
    for key in columns:
        if key in AGENT_NAMES:
            out[AGENT_NAMES[key]] = out.pop(f"{key}.mean")
    # Only what the rows measured: an app that reports no tokens has no token rows.
    return {k: v for k, v in out.items() if v is not None}


# ----------------------------------------------------------------------------- pass rates


def _verdict(value: Any, threshold: Any, op: str, row: int) -> bool | None:
    """Decide pass (True), fail (False) or invalid (None) for one row."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _PASS_WORDS:
            return _PASS_WORDS[word]
        if word == "invalid":
            return None
    score = _as_number(value)
    if score is None:
        return None
    return compare(score, op, _threshold_number(threshold, row))


def _pass_counts(values: Sequence[Any], threshold: Any, comparator: Any) -> tuple[int, int, int]:
    """Count (passed, valid, invalid) rows; the single rule behind every pass rate here."""
    rows = _rows(values)
    thresholds = _broadcast(threshold, len(rows))
    ops = _check_comparators(comparator, len(rows))
    passed = valid = 0
    for i, (value, limit, op) in enumerate(zip(rows, thresholds, ops, strict=True)):
        verdict = _verdict(value, limit, op, i)
        if verdict is not None:
            valid += 1
            passed += verdict
    return passed, valid, len(rows) - valid


@returns_keys(("pass_rate", "passed", "count", "invalid"))
def pass_rate(values: Sequence[Any], threshold: Any, comparator: Any = ">") -> Metrics:
    """Fraction of valid rows that pass; invalid rows are excluded from the denominator.

    Values may be numbers (compared with ``threshold``), booleans, or the words
    "pass"/"fail"/"invalid"; for the latter two kinds ``threshold`` is ignored (pass None).
    """
    passed, valid, invalid = _pass_counts(values, threshold, comparator)
    return {
        "pass_rate": _ratio(passed, valid),
        "passed": passed,
        "count": valid,
        "invalid": invalid,
    }


def _flag(value: Any) -> bool:
    """A run-wide switch that arrives as one value per row (flow inputs do): any row's True."""
    rows = value if isinstance(value, list) else [value]
    return any(v is True or str(v).strip().lower() in ("true", "1", "yes") for v in rows)


SCORE_SUMMARY_KEYS = ("mean", "pass_rate", "invalid", "invalid_rate", "count", "stdev")


@returns_keys(SCORE_SUMMARY_KEYS)
def score_summary(
    scores: Sequence[Any], threshold: Any = 3, comparator: Any = ">", invalid_as_fail: Any = False
) -> Metrics:
    """The usual judge summary: mean, pass rate and how many answers could not be parsed.

    The default rule ``score > 3`` matches Prompt Flow's built-in evaluators, so numbers
    stay comparable with results reported there. An unreadable score is left out of the pass
    rate by default; ``invalid_as_fail`` counts it as a fail instead, as Prompt Flow's
    evaluation flows do, so a pass rate can be matched with a Prompt Flow baseline.
    """
    # Scores are read as numbers once, so the mean and the pass rate count the same rows.
    numbers = [_as_number(v) for v in _rows(scores, "scores")]
    stats = mean(numbers)
    passed, valid, invalid = _pass_counts(numbers, threshold, comparator)
    as_fail = _flag(invalid_as_fail)
    return {
        "mean": stats["mean"],
        "pass_rate": _ratio(passed, valid + invalid if as_fail else valid),
        "invalid": invalid,
        "invalid_rate": _ratio(invalid, valid + invalid),
        "count": valid,
        "stdev": stats["stdev"],
    }


@returns_keys(("rate", "count", "invalid"))
def yes_rate(values: Sequence[Any]) -> Metrics:
    """Fraction of valid rows answering yes, for judges that reply 1/0, yes/no or true/false."""
    yes = valid = 0
    rows = _rows(values)
    for value in rows:
        answer = _yes_no(value)
        if answer is not None:
            valid += 1
            yes += answer
    return {"rate": _ratio(yes, valid), "count": valid, "invalid": len(rows) - valid}


def _yes_no(value: Any) -> bool | None:
    """Read one yes/no answer in any of the encodings judges use; anything else is invalid."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _BINARY.get(value)
    if isinstance(value, str):
        return _YES_WORDS.get(value.strip().lower())
    return None


# ------------------------------------------------------------------------------- safety


def _defect_keys(levels: Any) -> list[str] | None:
    """defect_rate's keys for the ``levels`` given (None when they come from the rows)."""
    if levels is PER_ROW:
        return None
    try:
        names = _check_levels(levels)
    except ValueError:
        return None  # the run says what is wrong with them
    rates = [f"defect_rate@{_safe_key(name)}" for name in names[1:]]
    return ["defect_rate", *rates, "count", "invalid"]


@returns_keys(lambda inputs: _defect_keys(inputs.get("levels")))
def defect_rate(
    severities: Sequence[Any], threshold: Any = "medium", levels: Sequence[str] | None = None
) -> Metrics:
    """Share of valid rows whose severity is at or above ``threshold``, plus each level's rate.

    Severities are labels from ``levels`` (lowest first, case-insensitive), integer indices
    into it, or None (invalid). ``defect_rate@<level>`` is reported for every level but the
    lowest (whose rate is always 1), so a reader can re-cut the result at another threshold.
    """
    names = _check_levels(levels)
    rows = _rows(severities, "severities")
    per_row = isinstance(threshold, (list, tuple))
    limits = _broadcast(threshold, len(rows))
    # Checked even with zero rows, so a misspelt level fails before any data is seen.
    checked = [
        _threshold_level(t, names, i if per_row else None)
        for i, t in enumerate(limits if per_row else [threshold])
    ]
    limit_index = checked if per_row else checked * len(rows)

    found = [_severity_index(v, names) for v in rows]
    valid = [(s, lim) for s, lim in zip(found, limit_index, strict=True) if s is not None]
    out: Metrics = {"defect_rate": _ratio(sum(s >= lim for s, lim in valid), len(valid))}
    for level_index, name in enumerate(names[1:], start=1):
        at_or_above = sum(s >= level_index for s, _ in valid)
        out[f"defect_rate@{_safe_key(name)}"] = _ratio(at_or_above, len(valid))
    out["count"] = len(valid)
    out["invalid"] = len(rows) - len(valid)
    return out


# ------------------------------------------------------------------------------- counting


def counts(values: Sequence[Any]) -> Metrics:
    """How often each distinct value occurs, as ``n_<value>`` keys, plus the total ``count``.

    Keys are made safe for metric names; values that differ only in case or spacing ("Yes" and
    "yes") are counted together, which is what a reader of the report expects, and values
    that differ otherwise never share a key (see :func:`_safe_keys`).
    """
    rows = [
        int(v) if isinstance(v, float) and v.is_integer() else v  # 1.0 and 1: one answer
        for v in _rows(values)
    ]
    keys = _safe_keys(rows)
    tally: dict[str, int] = {}
    for value in rows:
        key = f"n_{key_of(keys, value)}"
        tally[key] = tally.get(key, 0) + 1
    return {"count": len(rows), **dict(sorted(tally.items()))}
