"""Terminal views: the live progress bar, the metrics table, `flowkit show` and `flowkit runs`."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from flowkit.engine.context import Stats
from flowkit.runs.folder import effective_status, read_metrics, read_run_info, resolve_run_dir


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and len(value) == 2:  # an interval (`….corrected_ci`)
        return f"[{_fmt(value[0])}, {_fmt(value[1])}]"
    return "—" if value is None else str(value)


def count_rows(path: Path, limit: int | None = None) -> int | None:
    """The rows a data file will yield, for the ETA: lines of a .jsonl (a .csv less its header),
    counted in binary chunks; None for .json, whose rows are only known once it is parsed."""
    suffix = path.suffix.lower()
    try:
        regular = path.is_file()
    except OSError:  # a name too long: the run itself says so
        regular = False
    if suffix not in (".jsonl", ".csv") or not regular:
        return limit
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
        f.seek(max(0, f.tell() - 1))
        lines += f.tell() > 0 and f.read(1) != b"\n"
    total = lines - 1 if suffix == ".csv" else lines
    return min(total, limit) if limit is not None else total


@contextlib.contextmanager
def progress_display(
    console: Console, *, enabled: bool = True, total: int | None = None
) -> Iterator[Callable[[Stats], None] | None]:
    """A rich progress line: rows done, failed, cached, the rate and the tokens so far.

    When the console is no terminal (CI logs, a pipe), a plain line every few seconds instead
    (``FLOWKIT_PROGRESS_SECONDS``, default 5), printed from a timer so that a run whose rows
    are all waiting on retries still shows life."""
    if not enabled:
        yield None
        return
    if not console.is_terminal and os.environ.get("FLOWKIT_PROGRESS") != "1":
        with progress_lines(console, total) as print_update:
            yield print_update
        return
    progress = Progress(
        TextColumn("[bold]rows[/] {task.completed}" + (f"/{total}" if total else "")),
        BarColumn(bar_width=None),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("run", total=total, detail="")

    def update(stats: Stats) -> None:
        elapsed = max(time.monotonic() - stats.started, 1e-9)
        tokens = stats.token_totals()["total_tokens"]
        detail = (
            f"ok {stats.succeeded} · failed {stats.failed + stats.bad_input} · "
            f"invalid {stats.invalid} · cache hits {stats.cache_hits} · "
            f"{stats.rows / elapsed:,.0f} rows/s" + (f" · {tokens:,} tokens" if tokens else "")
        )
        if stats.waiting:
            detail += f" · {stats.waiting}"
        progress.update(task, completed=stats.rows, detail=detail)

    with progress:
        yield update


@contextlib.contextmanager
def progress_lines(console: Console, total: int | None) -> Iterator[Callable[[Stats], None]]:
    every = float(os.environ.get("FLOWKIT_PROGRESS_SECONDS") or 5)
    seen: list[Stats] = []
    started = time.monotonic()
    stop = threading.Event()

    def update(stats: Stats) -> None:
        if not seen:
            seen.append(stats)  # the executor's own object: later reads see it move

    def tick() -> None:
        while not stop.wait(every):
            line = _progress_line(seen[0] if seen else None, total, started)
            console.print(line, highlight=False)

    timer = threading.Thread(target=tick, name="flowkit-progress", daemon=True)
    timer.start()
    try:
        yield update
    finally:
        stop.set()
        timer.join()


def _progress_line(stats: Stats | None, total: int | None, started: float) -> str:
    elapsed = time.monotonic() - started
    if stats is None:
        return f"progress: 0 rows done after {elapsed:.0f}s (waiting on the first row)"
    done = f"{stats.rows}/{total}" if total else str(stats.rows)
    line = (
        f"progress: rows {done} · ok {stats.succeeded} · failed {stats.failed + stats.bad_input}"
        f" · invalid {stats.invalid} · {stats.rows / max(elapsed, 1e-9):,.0f} rows/s"
        f" · {elapsed:.0f}s"
    )
    return f"{line} · {stats.waiting}" if stats.waiting else line  # a batch run's batches


def metrics_table(metrics: dict[str, Any], info: dict[str, Any] | None = None) -> Table:
    table = Table("metric", "value", box=None, title="metrics", title_justify="left")
    for name, value in metrics.items():
        table.add_row(name, _fmt(value))
    for node, detail in ((info or {}).get("aggregates") or {}).items():
        if detail.get("status") == "skipped":
            table.add_row(Text(f"{node}: skipped", "dim"), "no row had its inputs")
        elif detail.get("rows_left_out"):
            table.add_row(Text(f"{node}: rows left out", "dim"), str(detail["rows_left_out"]))
        if detail.get("error"):
            table.add_row(Text(f"{node} failed", "red"), detail["error"])
    return table


def _status(info: dict[str, Any]) -> str:
    status = effective_status(info)
    return status if status == info.get("status") else f"{status} (process gone)"
    return True


def batch_note(info: dict[str, Any]) -> str:
    """What a run whose calls went (partly) through a batch API would have cost online."""
    online = (info.get("cost") or {}).get("online_usd")
    return "" if online is None else f"in batches; the same calls online ≈ ${online:.4f}"


def show_run(console: Console, run_ref: str, root: Path) -> None:
    run_dir = resolve_run_dir(run_ref, root)
    info = read_run_info(run_dir)
    metrics = read_metrics(run_dir)
    counts = info.get("counts") or {}
    head = Table(box=None, show_header=False)
    head.add_row("run", info.get("run_id", run_dir.name))
    flow = info.get("flow")
    flow = flow if isinstance(flow, dict) else {}
    head.add_row("flow", f"{flow.get('name', '?')} ({flow.get('path', '?')})")
    head.add_row("data", str(info.get("data", {}).get("path")))
    head.add_row("status", _status(info))
    head.add_row("started", str(info.get("started")))
    head.add_row("ended", str(info.get("ended", "—")))
    if counts:
        head.add_row("rows", ", ".join(f"{k} {v}" for k, v in counts.items()))
    tokens = info.get("tokens") or {}
    if tokens.get("calls"):
        head.add_row(
            "tokens",
            f"{tokens['total_tokens']:,} ({tokens['prompt_tokens']:,} prompt, "
            f"{tokens['completion_tokens']:,} completion) in {tokens['calls']:,} calls",
        )
    cost = (info.get("cost") or {}).get("usd")
    if cost is not None:
        head.add_row(
            "cost", f"≈ ${cost:.4f} (estimate; prices as of {info['cost']['prices_as_of']})"
        )
    if batch_note(info):
        head.add_row("", batch_note(info))
    parts: list[Any] = [head]
    # Scores (mean, pass rate, invalid, failed rows per metric) summarise the metrics table;
    # the slowest nodes and the grouped errors, read from the traces, follow the token usage.
    from flowkit.inspect.trace_view import show_sections

    extra = show_sections(run_dir, info, metrics)
    if extra.scores is not None:
        parts.append(extra.scores)
    if metrics:
        parts.append(metrics_table(metrics, info))
    by_node = info.get("tokens_by_node") or {}
    if by_node:
        costs = (info.get("cost") or {}).get("by_node") or {}
        t = Table(
            "node",
            "model",
            "calls",
            "prompt",
            "completion",
            "total",
            "≈ USD",
            box=None,
            title="tokens by node",
            title_justify="left",
        )
        for node, u in by_node.items():
            usd = costs.get(node)
            t.add_row(
                node,
                str(u.get("model") or "—"),
                *(
                    f"{u[k]:,}"
                    for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens")
                ),
                "—" if usd is None else f"{usd:.4f}",
            )
        parts.append(t)
    parts.extend(t for t in (extra.slowest, extra.errors) if t is not None)
    console.print(Group(*parts))


def runs_table(root: Path) -> Table:
    table = Table("run", "flow", "started", "status", "rows", "failed", "key metrics", box=None)
    dirs = sorted(
        (p for p in root.glob("*") if (p / "run.json").is_file()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for run_dir in dirs:
        try:
            info = read_run_info(run_dir)
        except (OSError, ValueError):
            continue
        try:
            metrics = read_metrics(run_dir)
        except (OSError, ValueError):  # a damaged metrics.json: the run is listed without them
            metrics = {}
        key = [
            f"{k}={_fmt(v)}"
            for k, v in metrics.items()
            if k.endswith((".mean", ".pass_rate", ".defect_rate", ".rate"))
        ][:3]
        counts = info.get("counts") or {}
        table.add_row(
            run_dir.name,
            info.get("flow", {}).get("name", "?"),
            str(info.get("started", ""))[:19],
            _status(info),
            str(counts.get("rows", "")),
            str(counts.get("failed", 0) + counts.get("bad_input", 0)) if counts else "",
            " ".join(key),
        )
    return table
