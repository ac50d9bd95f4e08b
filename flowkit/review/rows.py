"""What the review page shows and in which order: the rows of a run, the output being labelled,
the draw, and the state a page resumes from (labels so far, progress, the label budget).

The draw: ``random`` (seeded) is a uniform sample, the one the corrected (PPI++) figures assume;
``score`` takes the rows round-robin across the judge's score levels, so rare scores are seen
early; ``disagreement`` puts first the rows where the run's judges disagree most (each judge's
scores scaled to 0–1). The last two are for finding where the judge goes wrong; their labels
still count in `flowkit agree`, and the page says that the corrected figures assume a uniform
draw.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.labels.estimates import labels_needed, ppi_mean
from flowkit.labels.read import as_value, is_level, is_truth_word, read_labels, run_rows
from flowkit.labels.store import RUN_LABELS
from flowkit.labels.summary import majority
from flowkit.metrics.scores import DEFAULT_LEVELS
from flowkit.runs.folder import read_run_info

DRAWS = ("random", "score", "disagreement")
_ANSWER = ("answer", "response", "prediction")
_CONTEXT = ("context", "contexts", "retrieved_contexts", "documents")


def _number(value: Any) -> float | None:
    try:
        return as_value(value)
    except ValueError:
        return None


@dataclass
class Review:
    """One review session's fixed parts: the run, the output labelled, the order of rows."""

    run_dir: Path
    output: str
    binary: bool
    levels: list[float]
    order: list[int]
    uniform: bool
    """Whether the draw is a uniform sample (``random``), as the corrected figures assume."""
    rows: dict[int, dict[str, Any]]
    width: float | None
    hide_judge: bool
    annotator: str

    @property
    def labels_path(self) -> Path:
        return self.run_dir / RUN_LABELS

    def row(self, line: int) -> dict[str, Any]:
        """A row as the page shows it: inputs, answer, context and every judge's figures."""
        record = self.rows[line]
        inputs = dict(record.get("inputs") or {})
        outputs = dict(record.get("outputs") or {})
        answer = next((inputs.pop(c) for c in _ANSWER if c in inputs), None)
        context = next((inputs.pop(c) for c in _CONTEXT if c in inputs), None)
        return {
            "line": line,
            "inputs": inputs,
            "answer": answer,
            "context": context,
            "judges": outputs,
        }

    def state(self) -> dict[str, Any]:
        """Labels so far (this annotator's, by line), progress and the label budget."""
        labelled: dict[int, float] = {}
        budget: dict[str, Any] = {"width": self.width}
        if self.labels_path.is_file():
            labels = read_labels(self.labels_path, self.run_dir, "line", [*self.rows.values()])
            found = labels.outputs.get(self.output)
            if found is not None:
                labelled = {
                    line: votes[self.annotator]
                    for line, votes in found.human.items()
                    if self.annotator in votes
                }
                budget.update(_budget(found.human, found.judge, self.width))
        return {
            "output": self.output,
            "binary": self.binary,
            "levels": self.levels,
            "order": self.order,
            "labelled": {str(k): v for k, v in labelled.items()},
            "done": sum(1 for line in self.order if line in labelled),
            "total": len(self.order),
            "budget": budget,
            "hide_judge": self.hide_judge,
            "uniform": self.uniform,
        }


def _budget(
    human: dict[int, dict[str, float]], judge: dict[int, float], width: float | None
) -> dict[str, Any]:
    lines = [line for line in human if line in judge]
    rest = [line for line in judge if line not in human]
    if len(lines) < 2:
        return {"interval": None, "more": None}
    y = [majority(human[line]) for line in lines]
    f = [judge[line] for line in lines]
    fu = [judge[line] for line in rest]
    estimate = ppi_mean(y, f, fu)
    more = labels_needed(y, f, fu, width) if width else None
    return {"interval": [estimate.lo, estimate.hi], "estimate": estimate.value, "more": more}


def open_review(
    run_dir: Path,
    output: str | None,
    draw: str,
    seed: int,
    width: float | None,
    hide_judge: bool,
    annotator: str,
) -> Review:
    info = read_run_info(run_dir)
    records = run_rows(run_dir)
    rows = {line: dict(r.get("outputs") or {}) for line, r in records.items()}
    # A scored output: a number (or pass/fail, a severity) on every row where it has a value;
    # a row whose judge answer was unreadable (None, the run's `invalid`) does not disqualify it.
    numeric = [
        n
        for n in dict.fromkeys(k for o in rows.values() for k in o)
        if any(o.get(n) is not None for o in rows.values())
        and all(o.get(n) is None or _number(o.get(n)) is not None for o in rows.values())
    ]
    if output is None:
        preferred = [n for n in ("score", "result") if n in numeric]
        if not (preferred or numeric):
            raise UsageError(f"run {info.get('run_id', run_dir.name)!r} has no output to label")
        output = (preferred or numeric)[0]
    elif output not in numeric:
        raise UsageError(
            f"--output {output!r} is not a scored output of the run{did_you_mean(output, numeric)}",
            hint=f"scored outputs: {one_of(numeric)}",
        )
    judge = {
        line: value for line, o in rows.items() if (value := _number(o.get(output))) is not None
    }
    if _severity(records, output):  # very low … high, even if the judge said only the lowest
        binary, levels = False, [float(i) for i in range(len(DEFAULT_LEVELS))]
    else:
        binary = set(judge.values()) <= {0.0, 1.0}
        levels = [0.0, 1.0] if binary else _levels(judge.values())
    # rows without a judge value last: the corrected figures cannot use their labels
    order = _draw(draw, judge, rows, numeric, seed) + sorted(set(rows) - set(judge))
    uniform = draw == "random"
    return Review(
        run_dir, output, binary, levels, order, uniform, records, width, hide_judge, annotator
    )


def _severity(records: dict[int, dict[str, Any]], output: str) -> bool:
    """Whether ``output`` is on a severity scale: its values are severity words, or the flow's
    threshold is one and the output is no pass/fail verdict."""
    raw = [(r.get("outputs") or {}).get(output) for r in records.values()]
    if any(isinstance(v, str) and is_level(v) for v in raw):
        return True
    thresholds = [(r.get("inputs") or {}).get("threshold") for r in records.values()]
    if not any(isinstance(t, str) and is_level(t) for t in thresholds):
        return False
    return not all(isinstance(v, bool) or is_truth_word(v) for v in raw if v is not None)


def _levels(values: Any) -> list[float]:
    """The scale the reviewer picks from: whole numbers from the judge's lowest to highest
    value (at least 1–5 for a 1–5 judge that never said 1)."""
    low, high = int(min(values, default=1)), int(max(values, default=5))
    low, high = min(low, 1), max(high, 5) if high <= 5 else high
    return [float(v) for v in range(low, high + 1)]


def _draw(
    draw: str, judge: dict[int, float], rows: dict[int, dict[str, Any]], names: list[str], seed: int
) -> list[int]:
    lines = sorted(judge)
    random.Random(seed).shuffle(lines)
    if draw == "random":
        return lines
    if draw == "score":
        strata: dict[float, list[int]] = defaultdict(list)
        for line in lines:
            strata[judge[line]].append(line)
        out: list[int] = []
        queues = [strata[k] for k in sorted(strata)]
        while any(queues):
            out.extend(q.pop(0) for q in queues if q)
        return out
    spans = {}
    for name in names:
        values = [v for o in rows.values() if (v := _number(o.get(name))) is not None]
        spans[name] = (min(values), max(values) - min(values) or 1.0)

    def spread(line: int) -> float:
        scaled = [((_number(rows[line].get(n)) or 0.0) - spans[n][0]) / spans[n][1] for n in names]
        return max(scaled) - min(scaled) if scaled else 0.0

    return sorted(lines, key=spread, reverse=True)  # stable: ties keep the random order
