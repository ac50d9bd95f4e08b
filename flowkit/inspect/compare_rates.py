"""Intervals for the rates of metrics.json: a pass rate, a defect rate, any share of rows.

A rate is the mean of a per-row 0/1: whether the row's label is one value (``result ==
'pass'``), or its number is at or beyond a cut (``score >= 4``, a severity at or above
``medium``), over the rows that have one. The runs' files do not say which, so the rows are
found as the indicator whose share equals the rate in both runs: the outputs of the metric's own
flow first (``groundedness.result`` for ``groundedness.pass_rate``), labels before numbers,
then by name; a 0/1 output is its own indicator. Then:

- every row with a value paired: the paired bootstrap of the 0/1 differences, as a per-row
  output's mean gets it;
- otherwise the two runs' shares apart: Newcombe's interval of two independent proportions;
- no per-row rows, but ``P.count`` (and ``P.invalid``) in both runs' metrics.json: Newcombe's
  interval from the successes and rows those give.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from flowkit.inspect.compare_rows import (
    LABEL_VALUES,
    Evidence,
    Side,
    is_number,
    paired_diffs,
)
from flowkit.inspect.intervals import Interval, bootstrap_ci, fewest_rows, newcombe

PAIRED = "paired bootstrap of the per-row {what}, the rows this rate counts"
APART = (
    "Newcombe's interval of two independent proportions, from the per-row {what} (not every "
    "row is paired)"
)
AMBIGUOUS = (
    "Newcombe's interval of two independent proportions: several per-row indicators have this "
    "share in both runs ({what}), so which rows it counts is unknown"
)
STORED = (
    "Newcombe's interval of two independent proportions, from each run's {count} (runs taken "
    "as independent)"
)
NO_SOURCE = (
    "none: no per-row output gives this rate in both runs, and metrics.json stores no "
    "{prefix}count for it"
)
_OPS = {">=": float.__ge__, "<=": float.__le__}


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def _counts(values: Iterable[float]) -> Counter[float] | None:
    """How many rows hold each value (NaN left out); None past :data:`LABEL_VALUES` values."""
    counts: Counter[float] = Counter()
    for v in values:
        if v == v:
            counts[v] += 1
            if len(counts) > LABEL_VALUES:
                return None
    return counts


def _share(counts: Counter[Any], hit: Any) -> float | None:
    total = sum(counts.values())
    return sum(n for v, n in counts.items() if hit(v)) / total if total else None


def _label_counts(side: Side, name: str) -> Counter[Any]:
    names = side.label_names[name]
    return Counter(names[c] for c in side.labels[name] if c >= 0)


def _candidates(
    sides: tuple[Side, Side], prefix: str, binary_only: bool
) -> Iterator[tuple[str, Any, Any, Any]]:
    """(what, how many rows hold each value in A, in B, the 0/1 rule) for each indicator, in
    the order of preference the module docstring gives."""
    a, b = sides
    labels = [] if binary_only else sorted(a.labels.keys() & b.labels.keys())
    numbers = sorted(a.names & b.names)
    order = [(n, True) for n in labels] + [(n, False) for n in numbers]
    order.sort(key=lambda item: not item[0].startswith(prefix) if prefix else False)
    for name, is_label in order:
        if is_label:
            la, lb = _label_counts(a, name), _label_counts(b, name)
            for value in dict.fromkeys([*a.label_names[name], *b.label_names[name]]):
                yield f"{name} == {value!r}", la, lb, (name, "==", value)
            continue
        na, nb = _counts(a.columns[name]), _counts(b.columns[name])
        if na is None or nb is None:
            continue
        if set(na) | set(nb) <= {0.0, 1.0}:
            yield f"0/1 output {name}", na, nb, (name, ">=", 1.0)
            if not binary_only:  # the share of zeros: a failure rate
                yield f"{name} == 0", na, nb, (name, "<=", 0.0)
            continue
        if binary_only:
            continue
        for cut in sorted(set(na) | set(nb)):
            for op in _OPS:
                yield f"{name} {op} {cut:g}", na, nb, (name, op, cut)


def _hits(rule: tuple[str, str, Any]) -> Any:
    _, op, value = rule
    if op == "==":
        return lambda v: v == value
    compare = _OPS[op]
    return lambda v: compare(v, value)


def _column(side: Side, rule: tuple[str, str, Any]) -> array[float]:
    name, op, value = rule
    if op == "==":
        if value not in side.label_names[name]:  # a label only the other run has
            return array("d", (math.nan if c < 0 else 0.0 for c in side.labels[name]))
        return side.label_column(name, value)
    hit = _hits(rule)
    return array("d", (math.nan if v != v else float(hit(v)) for v in side.columns[name]))


def find_rows(
    name: str, values: tuple[float, float], sides: tuple[Side, Side], binary_only: bool = False
) -> tuple[str, array[float], array[float], list[str]] | None:
    """The indicator whose share of rows is the rate in both runs: (what, A's 0/1 column, B's,
    the other indicators of its rank with that share but other rows). When those are not
    empty, which rows the rate counts is unknown (two 0/1 outputs of one share, an accuracy's
    and another's): a paired interval of the first would be a guess."""
    prefix = name.rpartition(".")[0]
    own = f"{prefix}." if prefix else ""
    found: tuple[str, array[float], array[float]] | None = None
    first_own = False
    others: list[str] = []
    for what, ca, cb, rule in _candidates(sides, own, binary_only):
        mine = bool(own) and str(rule[0]).startswith(own)
        if found is not None and first_own and not mine:
            break  # the metric's own flow's outputs outrank the others (a suite's)
        hit = _hits(rule)
        sa, sb = _share(ca, hit), _share(cb, hit)
        if sa is None or sb is None or not _close(sa, values[0]) or not _close(sb, values[1]):
            continue
        xs, ys = _column(sides[0], rule), _column(sides[1], rule)
        if found is None:
            found, first_own = (what, xs, ys), mine
        elif not (_same(xs, found[1]) and _same(ys, found[2])):
            others.append(what)
    return None if found is None else (*found, others)


def _same(xs: array[float], ys: array[float]) -> bool:
    """The same 0/1 rows (NaN where neither has a value)."""
    if len(xs) != len(ys):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(xs, ys, strict=True))


def rate_interval(
    name: str, values: tuple[float, float], ev: Evidence, *, binary_only: bool = False
) -> Interval | None:
    """The interval of rate ``name``'s change; None where neither the rows nor metrics.json
    give one (and ``binary_only``: where no 0/1 output has it as its mean)."""
    found = find_rows(name, values, ev.sides, binary_only)
    if found is not None:
        what, xs, ys, others = found
        diffs = paired_diffs(xs, ys, ev.pairs)
        if others:  # the shares are known, the rows are not: the runs' shares apart
            hits = [(int(sum(v for v in c if v == v)), sum(v == v for v in c)) for c in (xs, ys)]
            low, high = newcombe(*hits[0], *hits[1], ev.confidence)
            said = ", ".join([what, *others])
            return Interval(low, high, AMBIGUOUS.format(what=said))
        if diffs is not None and len(diffs) >= fewest_rows(ev.confidence):
            low, high = bootstrap_ci(
                diffs, resamples=ev.resamples, seed=ev.seed, confidence=ev.confidence
            )
            return Interval(low, high, PAIRED.format(what=what), what, len(diffs))
        hits = [(int(sum(v for v in col if v == v)), sum(v == v for v in col)) for col in (xs, ys)]
        low, high = newcombe(*hits[0], *hits[1], ev.confidence)
        return Interval(low, high, APART.format(what=what), what)
    if binary_only:
        return None
    stored = _stored(name, values, ev.metrics, ev.confidence)
    if stored is not None:
        return stored
    prefix = re.sub(r"[^/.]*$", "", name)
    return Interval(None, None, NO_SOURCE.format(prefix=prefix))


def _stored(
    name: str,
    values: tuple[float, float],
    metrics: tuple[Mapping[str, Any], Mapping[str, Any]],
    confidence: float,
) -> Interval | None:
    """Newcombe's interval from the rows each run's metrics.json counts: ``P.count`` (the valid
    rows, a pass rate's and a defect rate's denominator) or ``P.count`` + ``P.invalid`` (an
    invalid rate's, or a pass rate that counts invalid rows as fails), whichever makes the rate
    a whole number of rows in both runs."""
    prefix = re.sub(r"[^/.]*$", "", name)
    bases = [(f"{prefix}count",), (f"{prefix}count", f"{prefix}invalid")]
    if name.endswith("invalid_rate"):
        bases.reverse()
    for keys in bases:
        found = []
        for rate, m in zip(values, metrics, strict=True):
            parts = [m.get(k) for k in keys]
            counts = [int(p) for p in parts if is_number(p) and float(p).is_integer() and p >= 0]
            if len(counts) != len(parts):
                break
            n = sum(counts)
            hits = rate * n
            if n < 1 or not _close(hits, round(hits)):
                break
            found.append((round(hits), n))
        else:
            low, high = newcombe(*found[0], *found[1], confidence)
            return Interval(low, high, STORED.format(count=" + ".join(keys)))
    return None
