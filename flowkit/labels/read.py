"""Reading people's labels and pairing them with a run's rows.

A labels file is JSONL (or the run's own data file, whose ``human_<output>`` columns are the
labels). Per line: a key, an optional ``annotator`` and one value per labelled output, on the
output's own scale (a 1–5 ``score``, ``result`` pass/fail, yes/no or true/false, a severity
word). A column names a run output (``score``), the flow (``groundedness``, for its score), or
either with ``human_`` before it. The key defaults to ``request_id``, else ``id``, else ``line``
(a ``line`` column, else the label's own line number). A label whose key matches no row is kept
in ``Labels.unmatched`` so every caller can report it; none is dropped silently.

Labels written by ``flowkit review`` carry a ``label_id``: a line seen twice (a retried write)
counts once, an ``undo`` line withdraws its label, and a later label by the same annotator of
the same row and output replaces the earlier one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowkit.errors import DataError, UsageError, did_you_mean, display, one_of
from flowkit.metrics.scores import DEFAULT_LEVELS
from flowkit.runs.folder import read_run_info

GATED = (".corrected", ".labels_only")
"""Suffixes of the metrics ``--labels`` adds that a ``--gate`` may name."""
RESERVED = ("annotator", "label_id", "time", "note", "undo", "source", "request_id", "id", "line")
"""Columns of a labels file that are never labels."""
_TRUE = {"pass", "true", "yes", "y"}
_FALSE = {"fail", "false", "no", "n"}


@dataclass
class Output:
    """One labelled output: the judge's value per row and the people's labels per row."""

    name: str
    """The output's name in outputs.jsonl (``score``, ``result``, ``groundedness`` in a suite)."""
    metric: str
    """Its name in metrics.json (the flow's name for ``score`` and ``result``)."""
    judge: dict[int, float] = field(default_factory=dict)
    """Row line → the judge's value, for rows whose value is readable."""
    human: dict[int, dict[str, float]] = field(default_factory=dict)
    """Row line → annotator → label."""
    severity: bool = False
    """On a severity scale (very low = 0 … high = 3): never pass/fail, even when only its two
    lowest levels occur."""

    @property
    def binary(self) -> bool:
        values = {*self.judge.values(), *(v for a in self.human.values() for v in a.values())}
        return not self.severity and values <= {0.0, 1.0}


@dataclass
class Labels:
    """A labels file paired with a run."""

    key: str
    outputs: dict[str, Output]
    unmatched: list[tuple[int, str]]
    """(labels-file line number from 1, key) of labels whose key matches no row."""
    answers: dict[int, str]
    """Row line → the answer the judge saw (for the length probe)."""
    pass_rule: dict[int, tuple[float, str]]
    """Row line → (threshold, comparator) of a score output's pass rate."""

    def unmatched_note(self) -> str | None:
        if not self.unmatched:
            return None
        shown = ", ".join(f"line {n} ({self.key}={k!r})" for n, k in self.unmatched[:5])
        more = f" and {len(self.unmatched) - 5} more" if len(self.unmatched) > 5 else ""
        return f"{len(self.unmatched)} label(s) match no row of the run: {shown}{more}"


def as_value(value: Any) -> float | None:
    """A label or judge value as a number: pass/yes/true → 1, fail/no/false → 0, a severity
    word → its index (very low = 0), a number as itself; None for no value."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        word = " ".join(re.sub(r"[_\-]", " ", value).lower().split())
        if word in _TRUE:
            return 1.0
        if word in _FALSE:
            return 0.0
        if word in DEFAULT_LEVELS:
            return float(DEFAULT_LEVELS.index(word))
        try:
            return float(word)
        except ValueError:
            pass
    raise ValueError(
        f"{value!r} is not a number, pass/fail, yes/no, true/false or a severity level "
        f"({', '.join(DEFAULT_LEVELS)})"
    )


def read_labels(
    path: Path,
    run_dir: Path,
    key: str | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> Labels:
    """Pair the labels in ``path`` with the rows of the run in ``run_dir``; ``rows``, the
    run's succeeded outputs.jsonl records when the caller has them already (the review page
    reads its labels on every keystroke, and a large run's outputs.jsonl takes seconds)."""
    # The run's own labels file is appended to by `flowkit review`: a line torn by a crash may
    # have later labels after it, and is skipped wherever it is.
    own = path.name == "labels.jsonl" and path.parent.resolve() == run_dir.resolve()
    records = _records(path, torn_anywhere=own)
    info = read_run_info(run_dir)
    flow = str(info.get("flow", {}).get("name", ""))
    if rows is None:
        rows = [r for r in _jsonl(run_dir / "outputs.jsonl") if r.get("status") == "ok"]
    names = {n for r in rows for n in (r.get("outputs") or {})}
    key = key or _default_key(records)
    own_data = {} if key == "line" else _data_rows(info)
    prefixed = any(c.startswith("human_") for _, r in records for c in r)
    by_key: dict[str, int] = {}
    repeated: dict[str, list[int]] = {}
    labels = Labels(key, {}, [], {}, {})
    for row in rows:
        line = int(row["line"])
        found = _row_key(row, own_data.get(line, {}), key, line)
        if found is not None:
            if by_key.get(found, line) != line:
                repeated.setdefault(found, [by_key[found]]).append(line)
            by_key[found] = line
        inputs = row.get("inputs") or {}
        answer = next(
            (inputs[c] for c in ("answer", "response", "prediction") if c in inputs), None
        )
        if isinstance(answer, str):
            labels.answers[line] = answer
        raw_threshold = inputs.get("threshold")
        threshold = as_value(raw_threshold)
        comparator = inputs.get("comparator")
        if isinstance(raw_threshold, str) and threshold is not None and is_level(raw_threshold):
            comparator = "<"  # a severity threshold: rows at or above it are defects
        labels.pass_rule[line] = (
            3.0 if threshold is None else threshold,
            comparator if comparator in (">", ">=", "<") else ">",
        )
    if key != "line" and not by_key:
        raise UsageError(
            f"no row of the run has a {key!r} column to match the labels by",
            hint="pass --key COLUMN, or label rows by `line`"
            + ("" if own_data else " (the run's data file is not found from here)"),
        )
    severity_run = any(rule[1] == "<" for rule in labels.pass_rule.values())
    worded: set[str] = set()  # outputs with a label that is a severity word
    seen: set[str] = set()
    latest: dict[tuple[str, str, str], tuple[int, float, str | None]] = {}
    for number, record in records:
        label_id = record.get("label_id")
        if label_id is not None:
            if record.get("undo"):
                for where, (_, _, lid) in list(latest.items()):
                    if lid == label_id:
                        del latest[where]
                continue
            if label_id in seen:
                continue
            seen.add(label_id)
        if key == "line" and "line" not in record:
            row_key = str(number - 1)
        elif key in record and record[key] is not None:
            row_key = str(record[key])
        else:
            raise DataError(f"{display(path)}:{number}: the label has no {key!r} column")
        annotator = str(record.get("annotator") or "")
        for column, value in record.items():
            if (
                column in RESERVED
                or column == key
                or (prefixed and not column.startswith("human_"))
            ):
                continue
            output = _output_name(column.removeprefix("human_"), names, flow, path, number)
            try:
                number_value = as_value(value)
            except ValueError as err:
                raise DataError(f"{display(path)}:{number}: label {column!r}: {err}") from None
            if isinstance(value, str) and is_level(value):
                worded.add(output)
            if number_value is not None:
                latest[(row_key, annotator, output)] = (number, number_value, label_id)
    unmatched: dict[int, str] = {}
    for (row_key, annotator, output), (number, value, _) in latest.items():
        matched = by_key.get(row_key)
        if row_key in repeated:
            rows_named = ", ".join(str(n) for n in repeated[row_key][:5])
            raise DataError(
                f"{display(path)}:{number}: {key}={row_key!r} names several rows of the run "
                f"(lines {rows_named}), so the label cannot say which",
                hint="pass --key with a column unique to each row, or label rows by `line`",
            )
        if matched is None:
            unmatched.setdefault(number, row_key)
            continue
        metric = flow if output in ("score", "result") and flow else output
        slot = labels.outputs.setdefault(output, Output(output, metric))
        slot.human.setdefault(matched, {})[annotator] = value
    labels.unmatched = sorted(unmatched.items())
    for name, slot in labels.outputs.items():
        raw = [(r.get("outputs") or {}).get(name) for r in rows]
        truth = all(isinstance(v, bool) or is_truth_word(v) for v in raw if v is not None)
        slot.severity = name in worded or any(isinstance(v, str) and is_level(v) for v in raw)
        slot.severity = slot.severity or (severity_run and not truth)
        for row, value in zip(rows, raw, strict=True):
            try:
                judged = as_value(value)
            except ValueError:
                judged = None  # an unreadable judge value is the run's `invalid`, not a label's
            if judged is not None:
                slot.judge[int(row["line"])] = judged
    return labels


def _output_name(column: str, names: set[str], flow: str, path: Path, number: int) -> str:
    if column in names:
        return column
    if column == flow and "score" in names:
        return "score"
    raise DataError(
        f"{display(path)}:{number}: label column {column!r} names no output of the run"
        f"{did_you_mean(column, [*names, flow])}",
        hint=f"the run's outputs: {one_of(names)}",
    )


def _default_key(records: list[tuple[int, dict[str, Any]]]) -> str:
    columns = {c for _, r in records for c in r}
    return next((k for k in ("request_id", "id") if k in columns), "line")


def _row_key(row: dict[str, Any], data: dict[str, Any], key: str, line: int) -> str | None:
    if key == "line":
        return str(line)
    value = data.get(key, (row.get("inputs") or {}).get(key))
    return None if value is None else str(value)


def _data_rows(info: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The run's data rows by line, when its data file is JSONL and still where it was (a key
    column such as ``id`` is often not an input of the flow)."""
    # run.json's data path is as the run was given it (relative to where it ran); its
    # invocation keeps the absolute one, which still works from another directory.
    names = [(info.get("invocation") or {}).get("data"), (info.get("data") or {}).get("path")]
    for name in names:
        if isinstance(name, str) and name.endswith(".jsonl") and os.path.isfile(name):
            return {n - 1: r for n, r in _records(Path(name)) if isinstance(r, dict)}
    return {}


def _word(text: str) -> str:
    return " ".join(re.sub(r"[_\-]", " ", text).lower().split())


def is_level(text: str) -> bool:
    return _word(text) in DEFAULT_LEVELS


def is_truth_word(value: Any) -> bool:
    return isinstance(value, str) and _word(value) in _TRUE | _FALSE


def _records(path: Path, torn_anywhere: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """(line number from 1, object) of a JSONL file; a torn last line (a crash mid-write) is
    skipped, any other bad line is an error (with ``torn_anywhere``, for a file flowkit
    appends to after a crash, every undecodable line is skipped)."""
    if not path.is_file():
        raise UsageError(f"no labels file {display(path)!r}")
    lines = path.read_text("utf-8-sig").split("\n")
    out = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            if number == len(lines) or torn_anywhere:  # a write cut short
                continue
            raise DataError(f"{display(path)}:{number}: not a JSON object ({err.msg})") from None
        if not isinstance(value, dict):
            raise DataError(f"{display(path)}:{number}: not a JSON object")
        out.append((number, value))
    return out


def run_rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Row line → its outputs.jsonl record, for the run's rows that succeeded."""
    return {int(r["line"]): r for r in _jsonl(run_dir / "outputs.jsonl") if r.get("status") == "ok"}


def run_outputs(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Row line → outputs, for the run's rows that succeeded."""
    return {line: dict(r.get("outputs") or {}) for line, r in run_rows(run_dir).items()}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [r for _, r in _records(path)] if path.is_file() else []
