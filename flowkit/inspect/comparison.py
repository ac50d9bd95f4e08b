"""`flowkit.compare(a, b)` and `RunResult.compare(other)`: `flowkit compare` from Python, as
tables a notebook shows and pandas can work on."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError
from flowkit.inspect.compare import Comparison, compare_runs
from flowkit.inspect.intervals import fewest_rows
from flowkit.runs.folder import resolve_run_dir

PER_ROW, AGGREGATE = "per-row output", "metrics.json"
COLUMNS = ["source", "rows", "A", "B", "difference", "ci_low", "ci_high", "verdict", "interval"]
PAIRED_ROWS = "paired bootstrap"
TOO_FEW_ROWS = "none: fewer than {n} paired rows with a value on both sides"


@dataclass
class RunComparison:
    """Run B compared with run A; ``comparison`` holds every detail `compare --json` prints."""

    run_a: Path
    run_b: Path
    comparison: Comparison

    @property
    def notes(self) -> list[str]:
        """What makes the verdicts doubtful (other flows, paired rows with other inputs)."""
        return list(self.comparison.notes)

    def to_pandas(self) -> Any:
        """One row per metric: each per-row output with its paired mean difference (B − A),
        bootstrap interval and verdict, then each metric of metrics.json with its difference,
        and its interval and verdict where the runs' files give them: a mean's, a rate's
        (flowkit.inspect.compare_means, compare_rates). ``interval`` says how each interval was
        worked out, or why there is none; a row without one has the verdict "none: no
        interval". The verdicts are those `flowkit compare`, ``--fail-if`` and its summary
        give (flowkit.inspect.intervals.verdict decides them all)."""
        pd = _pandas("to_pandas")
        too_few = TOO_FEW_ROWS.format(n=fewest_rows(self.comparison.confidence))
        rows = [
            [
                PER_ROW,
                m.n,
                m.mean_a,
                m.mean_b,
                m.delta,
                m.ci_low,
                m.ci_high,
                m.verdict,
                too_few if m.ci_low is None else PAIRED_ROWS,
            ]
            for m in self.comparison.metrics
        ]
        names = [m.name for m in self.comparison.metrics]
        for agg in self.comparison.aggregates:
            # rows: the paired rows behind a paired interval, as a per-row output's.
            row = [AGGREGATE, agg.rows, agg.a, agg.b, agg.delta, agg.ci_low, agg.ci_high]
            rows.append([*row, agg.verdict, agg.interval])
            names.append(agg.name)
        return pd.DataFrame(rows, columns=COLUMNS, index=pd.Index(names, name="metric"))

    def changes(self) -> Any:
        """The rows that changed most per output, regressions first (`compare --top`)."""
        pd = _pandas("changes")
        key = self.comparison.key or "line"
        records = [
            {
                "metric": c.metric,
                key: c.key,
                "line_a": c.line_a,
                "line_b": c.line_b,
                "A": c.a,
                "B": c.b,
                "difference": c.delta,
                "regression": c.regression,
            }
            for c in self.comparison.changes
        ]
        columns = ["metric", key, "line_a", "line_b", "A", "B", "difference", "regression"]
        return pd.DataFrame.from_records(records, columns=columns)

    def __repr__(self) -> str:
        verdicts = ", ".join(f"{m.name}: {m.verdict}" for m in self.comparison.metrics[:4])
        more = len(self.comparison.metrics) - 4
        extra = f", … {more} more" if more > 0 else ""
        return (
            f"<RunComparison {self.run_a.name} → {self.run_b.name}; "
            f"{self.comparison.paired} paired rows{'; ' if verdicts else ''}{verdicts}{extra}>"
        )

    def _repr_html_(self) -> str:
        head = (
            f"<div><b>{html.escape(self.run_b.name)}</b> compared with "
            f"<b>{html.escape(self.run_a.name)}</b>: {self.comparison.paired:,} paired rows"
        )
        notes = "".join(f"<br><i>{html.escape(n)}</i>" for n in self.comparison.notes)
        body = "".join(
            f"<tr><td>{html.escape(m.name)}</td><td>{_f(m.mean_a)}</td><td>{_f(m.mean_b)}</td>"
            f"<td>{_f(m.delta, '+')}</td><td>{_ci(m.ci_low, m.ci_high)}</td>"
            f"<td>{html.escape(m.verdict)}</td></tr>"
            for m in self.comparison.metrics
        )
        pct = f"{self.comparison.confidence:.0%}"
        return (
            f"{head}{notes}<table><thead><tr><th>output</th><th>A</th><th>B</th>"
            f"<th>difference</th><th>{pct} interval</th><th>verdict</th></tr></thead>"
            f"<tbody>{body}</tbody></table></div>"
        )


def _f(value: float | None, sign: str = "") -> str:
    return "—" if value is None else f"{value:{sign}.4g}"


def _ci(low: float | None, high: float | None) -> str:
    return "—" if low is None or high is None else f"[{low:+.4g}, {high:+.4g}]"


def _pandas(what: str) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise UsageError(
            f"RunComparison.{what}() needs pandas", hint="pip install pandas"
        ) from None
    return pd


def _run_dir(run: Any, root: Path) -> Path:
    folder = getattr(run, "run_dir", None)  # a RunResult
    if isinstance(folder, Path):
        return folder
    if isinstance(run, (str, os.PathLike)):
        return resolve_run_dir(run, root)
    raise UsageError(
        f"compare takes a run's name, its folder or a RunResult, not {type(run).__name__}"
    )


def compare(
    a: Any,
    b: Any,
    *,
    key: str | None = None,
    metrics: list[str] | tuple[str, ...] = (),
    lower_is_better: list[str] | tuple[str, ...] = (),
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    top: int = 10,
    runs_root: str | os.PathLike[str] = "runs",
) -> RunComparison:
    """Compare run ``b`` with run ``a`` (each a run name, a run folder or a RunResult), as
    `flowkit compare A B` does: rows paired by line (or by the input ``key``), a seeded
    paired bootstrap interval of each numeric output's mean difference, and a verdict."""
    dir_a, dir_b = _run_dir(a, Path(runs_root)), _run_dir(b, Path(runs_root))
    result = compare_runs(
        dir_a,
        dir_b,
        key=key,
        metrics=metrics,
        lower_is_better=lower_is_better,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
        top=top,
    )
    return RunComparison(dir_a, dir_b, result)
