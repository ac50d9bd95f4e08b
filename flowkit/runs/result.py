"""What a finished run returns: its metrics and counts, its rows read back from the folder, and
short displays for a terminal (``repr``) and a notebook (``_repr_html_``, the metrics table)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit.data.jsonl import iter_jsonl
from flowkit.errors import UsageError


@dataclass(repr=False)
class RunResult:
    """What a finished run produced; rows are read back lazily from the run folder."""

    run_dir: Path
    status: str
    metrics: dict[str, Any]
    counts: dict[str, int]
    tokens: dict[str, int]
    info: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def rows(self) -> Iterator[dict[str, Any]]:
        yield from iter_jsonl(self.run_dir / "outputs.jsonl")

    def traces(self) -> Iterator[dict[str, Any]]:
        yield from iter_jsonl(self.run_dir / "traces.jsonl")

    @property
    def failed_ratio(self) -> float:
        rows = self.counts.get("rows", 0)
        return (
            (self.counts.get("failed", 0) + self.counts.get("bad_input", 0)) / rows if rows else 0.0
        )

    @property
    def produced_values(self) -> bool:
        """Whether any row produced a value: False when every row failed or was bad input, or
        every judge answer was unreadable and no metric has a value."""
        c = self.counts
        if not c.get("succeeded"):
            return False
        if c.get("invalid", 0) < c["succeeded"]:
            return True
        return any(
            v is not None
            for k, v in self.metrics.items()
            if k.endswith((".mean", ".pass_rate", ".defect_rate", ".sum"))
        )

    def to_pandas(self) -> Any:
        """One row per data row: ``line``, ``status``, ``inputs.*``, ``outputs.*`` (nested
        outputs flattened with dots) and ``error`` (``node: type: message``, or None)."""
        try:
            import pandas as pd
        except ImportError:
            raise UsageError(
                "RunResult.to_pandas() needs pandas", hint="pip install pandas"
            ) from None
        records = []
        for row in self.rows():
            error = row.get("error")
            records.append(
                {
                    "line": row.get("line"),
                    "status": row.get("status"),
                    "inputs": row.get("inputs") or {},
                    "outputs": row.get("outputs") or {},
                    "error": _error_text(error) if isinstance(error, dict) else error,
                }
            )
        frame = pd.json_normalize(records, sep=".")
        return frame.set_index("line") if len(frame) else frame

    def compare(self, other: Any, **options: Any) -> Any:
        """This run (A) compared with ``other`` (B: a RunResult, a run's name or folder), as
        :func:`flowkit.compare` does; ``to_pandas()`` on the answer gives the table."""
        from flowkit.inspect.comparison import compare  # inspect reads runs: loaded on use

        return compare(self, other, **options)

    def summary(self) -> str:
        """``6 rows: 5 ok, 1 failed, 0 bad input, 2 invalid``."""
        c = self.counts
        return (
            f"{c.get('rows', 0)} rows: {c.get('succeeded', 0)} ok, {c.get('failed', 0)} failed, "
            f"{c.get('bad_input', 0)} bad input, {c.get('invalid', 0)} invalid"
        )

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in list(self.metrics.items())[:4])
        more = f", … {len(self.metrics) - 4} more" if len(self.metrics) > 4 else ""
        return f"<RunResult {self.run_id} {self.status}; {self.summary()}; {shown}{more}>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td></tr>"
            for k, v in self.metrics.items()
        )
        return (
            f"<div><b>{html.escape(self.run_id)}</b> — {html.escape(self.status)}; "
            f"{html.escape(self.summary())}<br><code>{html.escape(str(self.run_dir))}</code>"
            f"<table><thead><tr><th>metric</th><th>value</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>"
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def _error_text(error: dict[str, Any]) -> str:
    """``node: type: message``; a bad input row's error names no node: ``type: message``."""
    parts = (error.get("node"), error.get("type"), error.get("message"))
    return ": ".join(str(part) for part in parts if part)
