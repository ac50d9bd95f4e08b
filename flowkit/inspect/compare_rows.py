"""The rows `flowkit compare` pairs: each run's numeric per-row outputs read into columns, and
the pairing of A's rows with B's, by line or by a key column.

A million-row run is read as a stream into a few arrays of 8-byte numbers, never a dict per row,
and pairing by line is a merge of the two files' line orders.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from flowkit.data.jsonl import iter_jsonl
from flowkit.inspect.trace_view import lookup


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def leaves(outputs: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, value) for every value in a row's outputs that is not a dict: a suite's
    nested outputs flatten to ``groundedness.score``."""
    if not isinstance(outputs, dict):
        return
    for name, value in outputs.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from leaves(value, path + ".")
        else:
            yield path, value


def numeric_outputs(outputs: Any) -> Iterator[tuple[str, float]]:
    """(dotted name, value) for every number in a row's outputs. Booleans count as 0/1
    (exact-match style results)."""
    for path, value in leaves(outputs):
        if isinstance(value, bool) or is_number(value):
            yield path, float(value)


LABEL_CHARS, LABEL_VALUES = 40, 16
"""A per-row string output is kept as labels ("pass", "fail", "invalid", a severity) while its
values are at most this short and this few; free text (a reason, a raw reply) is dropped."""


def _split(outputs: Any) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """A row's numbers (as :func:`numeric_outputs`) and its strings (the labels a rate of
    metrics.json counts), in one walk."""
    numbers, labels = [], []
    for path, value in leaves(outputs):
        if isinstance(value, str):
            labels.append((path, value))
        elif isinstance(value, bool) or is_number(value):
            numbers.append((path, float(value)))
    return numbers, labels


def _hashable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return json.dumps(value, sort_keys=True, default=str)


@dataclass
class Side:
    """Each row's numbers, one column per output (NaN where a row has none): a million rows
    take a few arrays of 8-byte values, not a dict per row."""

    lines: array[int] = field(default_factory=lambda: array("q"))
    columns: dict[str, array[float]] = field(default_factory=dict)
    keys: list[Any] = field(default_factory=list)
    """With --key: each kept row's key value (without, the line is the key)."""
    index: dict[Any, int] = field(default_factory=dict)
    """With --key: key value → the row's place in the columns."""
    count: int = 0
    unkeyed: int = 0
    duplicates: int = 0
    input_names: set[str] = field(default_factory=set)

    inputs: dict[str, array[int]] = field(default_factory=dict)
    """Per input name, a hash of each row's value (``NO_INPUT`` where it has none): paired
    rows should share their inputs."""

    labels: dict[str, array[int]] = field(default_factory=dict)
    """Per short string output (:data:`LABEL_VALUES` values at most), each row's label as an
    index into ``label_names[name]`` (-1 where the row has none)."""
    label_names: dict[str, list[str]] = field(default_factory=dict)
    free_text: set[str] = field(default_factory=set)
    """String outputs with too many or too long values to be labels."""

    @property
    def names(self) -> set[str]:
        return set(self.columns)

    def add(
        self,
        line: int,
        values: Iterable[tuple[str, float]],
        inputs: Any,
        labels: Iterable[tuple[str, str]] = (),
    ) -> None:
        at = len(self.lines)
        self.lines.append(line)
        _put(self.columns, at, values, "d", _NAN)
        _put(self.labels, at, self._codes(labels), "h", -1)
        if isinstance(inputs, dict):
            hashes = ((str(n), hash(_hashable(v))) for n, v in inputs.items())
            _put(self.inputs, at, hashes, "q", NO_INPUT)
        else:
            _put(self.inputs, at, (), "q", NO_INPUT)

    def _codes(self, labels: Iterable[tuple[str, str]]) -> Iterator[tuple[str, int]]:
        """Each label as its index among its output's values; an output that outgrows
        :data:`LABEL_VALUES` is free text from then on, and its column is dropped."""
        for name, text in labels:
            if name in self.free_text:
                continue
            names = self.label_names.setdefault(name, [])
            if text not in names:
                if len(names) == LABEL_VALUES or len(text) > LABEL_CHARS:
                    self.free_text.add(name)
                    self.labels.pop(name, None)
                    del self.label_names[name]
                    continue
                names.append(text)
            yield name, names.index(text)

    def label_column(self, name: str, value: str) -> array[float]:
        """1.0 where the row's label ``name`` is ``value``, 0.0 where it is another, NaN where
        the row has none: a rate's rows, as a numeric column."""
        code = self.label_names[name].index(value)
        return array("d", (_NAN if c < 0 else float(c == code) for c in self.labels[name]))


def _put(
    columns: dict[str, Any], at: int, items: Iterable[tuple[str, Any]], code: str, missing: Any
) -> None:
    """Row ``at``'s values into ``columns``, one array per name, ``missing`` where it has none."""
    for name, value in items:
        column = columns.get(name)
        if column is None:
            column = columns[name] = array(code, [missing]) * at
            column.append(value)
        elif len(column) == at:
            column.append(value)
    for column in columns.values():
        if len(column) == at:
            column.append(missing)


NO_INPUT = -(2**63)
"""No input of that name in the row (a hash is never this)."""
_NAN = float("nan")


def read_side(run_dir: Path, key: str | None) -> Side:
    """Each row's numbers, by pairing key; only numbers are kept, so memory stays small."""
    side = Side()
    for rec in iter_jsonl(run_dir / "outputs.jsonl"):
        side.count += 1
        line = rec.get("line")
        if not isinstance(line, int):
            if key is None:
                side.unkeyed += 1
                continue
            line = -1
        if key is not None:
            if isinstance(rec.get("inputs"), dict) and len(side.input_names) < 1000:
                side.input_names.update(rec["inputs"])
            found, value = lookup(rec.get("inputs"), key)
            if not found or value is None:
                side.unkeyed += 1
                continue
            k = _hashable(value)
            if k in side.index:
                side.duplicates += 1
                continue
            side.index[k] = len(side.lines)
            side.keys.append(k)
        numbers, labels = _split(rec.get("outputs"))
        side.add(line, numbers, rec.get("inputs"), labels)
    return side


def _by_line(side: Side) -> Iterator[tuple[int, int]]:
    """(line, place) in line order, each line once (its first row)."""
    lines = side.lines
    ordered = all(lines[i] < lines[i + 1] for i in range(len(lines) - 1))
    places: Iterable[int] = (
        range(len(lines)) if ordered else sorted(range(len(lines)), key=lines.__getitem__)
    )
    last = None
    for place in places:
        line = lines[place]
        if line == last:
            side.duplicates += 1
        else:
            yield line, place
            last = line


@dataclass
class Pairs:
    """Which row of A goes with which row of B (places in each side's columns)."""

    a: array[int] = field(default_factory=lambda: array("q"))
    b: array[int] = field(default_factory=lambda: array("q"))
    keys: list[Any] = field(default_factory=list)
    """With --key, each pair's key value (by line, the lines in ``a`` say it)."""
    only_a: list[Any] = field(default_factory=list)
    only_b: list[Any] = field(default_factory=list)

    def key(self, i: int, side_a: Side) -> Any:
        return self.keys[i] if self.keys else side_a.lines[self.a[i]]


def pair_rows(a: Side, b: Side, key: str | None) -> Pairs:
    pairs = Pairs()
    if key is not None:
        for k, place in a.index.items():
            other = b.index.get(k)
            if other is None:
                pairs.only_a.append(k)
            else:
                pairs.a.append(place)
                pairs.b.append(other)
                pairs.keys.append(k)
        pairs.only_b = [k for k in b.index if k not in a.index]
        return pairs
    # Both files are in line order: a merge of the two, never a dict of a million lines.
    left, right = _by_line(a), _by_line(b)
    x, y = next(left, None), next(right, None)
    while x is not None and y is not None:
        if x[0] == y[0]:
            pairs.a.append(x[1])
            pairs.b.append(y[1])
            x, y = next(left, None), next(right, None)
        elif x[0] < y[0]:
            pairs.only_a.append(x[0])
            x = next(left, None)
        else:
            pairs.only_b.append(y[0])
            y = next(right, None)
    pairs.only_a.extend(line for line, _ in ([x] if x else []) + list(left))
    pairs.only_b.extend(line for line, _ in ([y] if y else []) + list(right))
    return pairs


def paired_diffs(xs: Sequence[float], ys: Sequence[float], pairs: Pairs) -> array[float] | None:
    """B − A over the paired rows with a value on both sides, when every row with a value (on
    either side) is paired; else None: the runs' values must then be taken apart."""
    diffs = array("d")
    for pa, pb in zip(pairs.a, pairs.b, strict=True):
        x, y = xs[pa], ys[pb]
        if x == x and y == y:
            diffs.append(y - x)
    valued = len(diffs)
    if sum(v == v for v in xs) != valued or sum(v == v for v in ys) != valued:
        return None
    return diffs


@dataclass(frozen=True)
class Evidence:
    """What two runs' files give a metric's interval: their metrics.json, their rows and how
    those pair, and the bootstrap's settings."""

    metrics: tuple[Mapping[str, Any], Mapping[str, Any]]
    sides: tuple[Side, Side]
    pairs: Pairs
    resamples: int
    seed: int
    confidence: float
