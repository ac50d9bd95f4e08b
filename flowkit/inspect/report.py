"""`flowkit report RUN [--compare RUN_B]`: a run as one self-contained HTML page.

The page is a static template shipped as package data (report_page.html, .css and .js: vanilla
JS, no library, nothing fetched) into which this module inlines the styles, the script and the
run's data as JSON. The data is built here from the run folder, reusing the readers behind
`flowkit show`, `trace` and `compare`, so the page shows what the terminal shows.

Caps, so that a large run still gives a file a browser opens quickly (each one is stated on the
page when it bites; `Limits` holds them):

- the rows table keeps the first ``max_rows`` rows, and past them the failed rows (up to as
  many again); metrics, counts and histograms always cover every row;
- node traces (inputs, outputs, prompts, responses, errors) are embedded for ``max_trace_rows``
  rows, chosen failed rows first, then the rows a comparison found changed most, then rows with
  an invalid score, then the rest in order; the aggregates' trace is always there;
- every text in a trace is folded at ``max_chars`` characters, and table cells at
  ``CELL_CHARS`` (a traceback keeps its end, where the error is).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from flowkit import __version__
from flowkit.errors import UsageError
from flowkit.inspect.compare import Comparison, compare_runs
from flowkit.inspect.report_data import (
    CELL_CHARS,
    Limits,
    histogram,
    read_rows,
    read_traces,
    table_data,
    trace_entry,
    trace_lines,
)
from flowkit.inspect.report_format import (
    _RATE,
    _plain,
    _rate_points,
    _seconds,
    _signed,
    _when,
    format_metric,
)
from flowkit.inspect.trace_view import fold, score_prefixes, summarize
from flowkit.labels.report import judge_vs_people
from flowkit.runs.folder import effective_status, read_metrics, read_run_info

REPORT_FORMAT = "flowkit.report"
REPORT_VERSION = 1
# A metric's headline value: the first of these keys its group has.
_MAIN_KEYS = ("mean", "defect_rate", "pass_rate", "yes_rate", "rate", "sum")
_PLACEHOLDER = re.compile(r"@@FLOWKIT_(CSS|JS|DATA)@@")


@dataclass
class ReportFile:
    """What `write_report` wrote, for the CLI's one-line summary."""

    path: Path
    size: int
    rows: int
    rows_in_table: int
    rows_traced: int


def _clean(value: Any) -> Any:
    """JSON.parse rejects NaN and Infinity; the page gets null for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# -- the run's header and metric cards ---------------------------------------------------------
def _run_header(run_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
    tokens = info.get("tokens") or {}
    cost = info.get("cost") or {}
    calls = tokens.get("calls") or 0
    if not calls:
        tokens_text, cost_text = "no model calls", "—"
    else:
        tokens_text = (
            f"{tokens.get('total_tokens', 0):,} ({tokens.get('prompt_tokens', 0):,} prompt + "
            f"{tokens.get('completion_tokens', 0):,} completion) in {calls:,} calls"
        )
        usd = cost.get("usd")
        cost_text = (
            "unknown (no price for the model)"
            if usd is None
            else f"≈ ${usd:.4f} (estimate; prices as of {cost.get('prices_as_of', '?')})"
        )
    flow = info.get("flow") or {}
    return {
        "id": info.get("run_id", run_dir.name),
        "name": info.get("name") or info.get("run_id") or run_dir.name,
        "dir": str(run_dir),
        "flow": flow.get("name", "?"),
        "flow_path": flow.get("path"),
        "data_path": (info.get("data") or {}).get("path"),
        "status": effective_status(info),
        "started": _when(info.get("started")),
        "ended": _when(info.get("ended")),
        "duration": _seconds(info.get("duration_seconds")),
        "counts": info.get("counts") or {},
        "tokens": tokens_text,
        "cost": cost_text,
        "tokens_by_node": [
            {
                "node": node,
                "model": u.get("model"),
                "calls": u.get("calls", 0),
                "prompt": u.get("prompt_tokens", 0),
                "completion": u.get("completion_tokens", 0),
                "total": u.get("total_tokens", 0),
                "usd": (cost.get("by_node") or {}).get(node),
            }
            for node, u in (info.get("tokens_by_node") or {}).items()
        ],
        "notices": list(info.get("notices") or ()),
        "aggregates": _aggregate_notes(info),
        "flowkit_version": info.get("flowkit_version"),
    }


def _aggregate_notes(info: dict[str, Any]) -> list[str]:
    notes = []
    for node, detail in (info.get("aggregates") or {}).items():
        if detail.get("status") == "skipped":
            notes.append(f"aggregate {node} was skipped: no row had its inputs")
        elif detail.get("rows_left_out"):
            notes.append(
                f"aggregate {node} left out {detail['rows_left_out']:,} rows "
                "(a node it reads failed or was skipped there)"
            )
        if detail.get("error"):
            notes.append(f"aggregate {node} failed: {detail['error']}")
    return notes


def _metric_groups(
    metrics: dict[str, Any], info: dict[str, Any], failed_by_node: dict[str, int]
) -> list[dict[str, Any]]:
    """The metrics grouped by prefix (``groundedness`` of ``groundedness.mean``), each group a
    card: the headline value, then every other key, and the rows where the group failed."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for name, value in metrics.items():
        prefix, _, key = name.rpartition(".")
        groups.setdefault(prefix, []).append((key, value))
    scored = set(score_prefixes(metrics))
    counts = info.get("counts") or {}
    flow_name = (info.get("flow") or {}).get("name")
    cards = []
    for prefix, items in groups.items():
        keys = [k for k, _ in items]
        main = next((k for k in _MAIN_KEYS if k in keys), keys[0])
        failed: int | None = None
        # As `flowkit show` counts them: a sub-flow's own failures, else the run's for the flow.
        if prefix in failed_by_node:
            failed = failed_by_node[prefix]
        elif prefix == flow_name:
            failed = counts.get("failed", 0) + counts.get("bad_input", 0)
        elif prefix in scored and counts:
            failed = 0
        cards.append(
            {
                "name": prefix or "metrics",
                "main": main,
                "items": [
                    {
                        "key": k,
                        "metric": f"{prefix}.{k}" if prefix else k,
                        "value": v if isinstance(v, (int, float)) else None,
                        "text": format_metric(k, v),
                        "rate": bool(_RATE.search(k)) and isinstance(v, (int, float)),
                    }
                    for k, v in items
                ],
                "failed": failed,
            }
        )
    return cards


# -- comparison ------------------------------------------------------------------------------------
def _comparison(cmp: Comparison, run_b: Path) -> dict[str, Any]:
    info_b = read_run_info(run_b)
    metrics = []
    for m in cmp.metrics:
        ci = "—" if m.ci_low is None else f"[{m.ci_low:+.4g}, {m.ci_high:+.4g}]"
        metrics.append(
            {
                "name": m.name,
                "n": m.n,
                "missing": m.missing,
                "mean_a": _plain(m.mean_a),
                "mean_b": _plain(m.mean_b),
                "delta": _signed(m.delta),
                "ci": ci,
                "verdict": m.verdict,
                "lower_is_better": m.lower_is_better,
                "plot": [m.ci_low, m.delta, m.ci_high],
            }
        )
    return {
        "b": {
            "id": info_b.get("run_id", run_b.name),
            "name": info_b.get("name") or run_b.name,
            "flow": (info_b.get("flow") or {}).get("name", "?"),
            "status": effective_status(info_b),
            "started": _when(info_b.get("started")),
        },
        "rows_a": cmp.rows_a,
        "rows_b": cmp.rows_b,
        "paired": cmp.paired,
        "key": cmp.key,
        "only_a": len(cmp.only_a),
        "only_b": len(cmp.only_b),
        "notes": list(cmp.notes),
        "method": f"paired bootstrap, {cmp.resamples:,} resamples, seed {cmp.seed}",
        "confidence": f"{cmp.confidence:.0%}",
        "metrics": metrics,
        "changes": [
            {
                "metric": c.metric,
                "key": None if cmp.key is None else fold(c.key, 60),
                "line_a": c.line_a,
                "line_b": c.line_b,
                "a": _plain(c.a),
                "b": _plain(c.b),
                "delta": _signed(c.delta),
                "regression": c.regression,
            }
            for c in cmp.changes
        ],
        "aggregates": [
            {
                "name": g.name,
                "a": format_metric(g.name, g.a),
                "b": format_metric(g.name, g.b),
                "delta": _rate_points(g.delta) if _RATE.search(g.name) else _signed(g.delta),
            }
            for g in cmp.aggregates
        ],
    }


# -- the whole page -----------------------------------------------------------------------------
def build_report(
    run_dir: Path,
    *,
    compare_with: Path | None = None,
    key: str | None = None,
    lower_is_better: Iterable[str] = (),
    top: int = 10,
    limits: Limits = Limits(),  # noqa: B008 - frozen, so one shared default is safe
) -> dict[str, Any]:
    """Everything the page shows, as JSON-able data."""
    if not (run_dir / "run.json").is_file():
        raise UsageError(f"{run_dir} is not a run folder (no run.json)")
    info = read_run_info(run_dir)
    metrics = read_metrics(run_dir)
    summary = summarize(run_dir, top=10)
    rows = read_rows(run_dir, limits)
    cmp = None
    if compare_with is not None:
        cmp = compare_runs(run_dir, compare_with, key=key, lower_is_better=lower_is_better, top=top)
    changed = [c.line_a for c in cmp.changes] if cmp else []
    wanted = trace_lines(rows, changed, limits.max_trace_rows)
    nodes = read_traces(run_dir, rows, set(wanted), limits.max_chars)
    traces = {
        str(line): trace_entry(rows, line, nodes.get(line, []), limits.max_chars)
        for line in [*wanted, *([-1] if -1 in nodes else [])]
    }
    return _clean(
        {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "flowkit_version": __version__,
            "run": _run_header(run_dir, info),
            "metric_groups": _metric_groups(metrics, info, summary.failed_by_node),
            "histograms": [histogram(n, v) for n, v in rows.numbers.items() if v],
            "table": table_data(rows),
            "traces": traces,
            "errors": [
                {
                    "node": g.node,
                    "type": g.type,
                    "count": g.count,
                    "example": fold(g.example, 300),
                    "lines": g.lines,
                }
                for g in summary.errors
            ],
            "slowest": [
                {"node": t.node, "kind": t.kind, "runs": t.runs, "total": t.total, "mean": t.mean}
                for t in summary.slowest
            ],
            "limits": {
                "rows": rows.total,
                "rows_in_table": len(rows.kept),
                "max_rows": limits.max_rows,
                "rows_traced": len(wanted),
                "max_trace_rows": limits.max_trace_rows,
                "max_chars": limits.max_chars,
                "cell_chars": CELL_CHARS,
            },
            "compare": _comparison(cmp, compare_with) if cmp and compare_with else None,
            "judge_vs_people": judge_vs_people(run_dir),
        }
    )


def _asset(name: str) -> str:
    return resources.files("flowkit.inspect").joinpath(name).read_text("utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` appears in it (each is a
    \\u escape inside a string, where JSON.parse reads it back), so no `</script>` or
    `<!--` in the data can end the element early."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def render_html(data: dict[str, Any]) -> str:
    """The page: the template with its styles, its script and the data inlined."""
    css, js = _asset("report_page.css"), _asset("report_page.js")
    if "</style" in css.lower() or "</script" in js.lower():
        raise AssertionError("a report asset would close its own element")
    parts = {"CSS": css, "JS": js, "DATA": embed_json(data)}
    # One pass, so nothing inserted is scanned for placeholders again.
    return _PLACEHOLDER.sub(lambda m: parts[m[1]], _asset("report_page.html"))


def write_report(
    run_dir: Path,
    output: Path,
    *,
    compare_with: Path | None = None,
    key: str | None = None,
    lower_is_better: Iterable[str] = (),
    top: int = 10,
    limits: Limits = Limits(),  # noqa: B008
) -> ReportFile:
    """Build the report of ``run_dir`` (against ``compare_with``) and write it to ``output``."""
    if output.is_dir():
        raise UsageError(f"-o {str(output)!r} is a folder", hint="give a file name: report.html")
    data = build_report(
        run_dir,
        compare_with=compare_with,
        key=key,
        lower_is_better=lower_is_better,
        top=top,
        limits=limits,
    )
    page = render_html(data).encode("utf-8")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(page)
    except OSError as err:
        blocker = next((d for d in output.parents if d.exists() and not d.is_dir()), None)
        why = f"{str(blocker)!r} is a file" if blocker else (err.strerror or str(err))
        raise UsageError(
            f"cannot write the report to {str(output)!r}: {why}",
            hint="give -o a path in a folder you can write",
        ) from None
    caps = data["limits"]
    return ReportFile(output, len(page), caps["rows"], caps["rows_in_table"], caps["rows_traced"])
