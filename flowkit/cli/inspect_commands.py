"""The commands that read runs: runs, show, trace, compare, report and export-otel.

They only read run folders; `flowkit.cli.main` adds them to the `flowkit` group.
"""

from __future__ import annotations

from pathlib import Path

import click

from flowkit.cli.options import ci_files
from flowkit.cli.terminal import console, err_console
from flowkit.errors import UsageError


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def show(run_ref: str, runs_dir: str) -> None:
    """Show a run: status, counts, scores, metrics, tokens and cost, slowest nodes, errors."""
    from flowkit.inspect.show import show_run

    show_run(console, run_ref, Path(runs_dir))


@click.command()
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def runs(runs_dir: str) -> None:
    """List the runs in runs/, newest first."""
    from flowkit.inspect.show import runs_table

    console.print(runs_table(Path(runs_dir)))


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--row", type=int, help="Show this row's nodes as a tree (-1: the aggregates).")
@click.option("--node", help="With --row: only this node (and, for a sub-flow, its nodes).")
@click.option("--failed", is_flag=True, help="List the failed rows: line, failing node, error.")
@click.option(
    "--where",
    "conditions",
    multiple=True,
    metavar="PATH<OP>VALUE",
    help="List rows whose outputs match, e.g. 'groundedness.score<3' (repeat: all must hold).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON instead.")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks of failed nodes.")
@click.option(
    "--max-chars", default=300, show_default=True, help="Fold longer values (0: never fold)."
)
@click.option("--limit", default=100, show_default=True, help="Rows to list (0: all).")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def trace(
    run_ref: str,
    row: int | None,
    node: str | None,
    failed: bool,
    conditions: tuple[str, ...],
    as_json: bool,
    verbose: bool,
    max_chars: int,
    limit: int,
    runs_dir: str,
) -> None:
    """Inspect a run's rows: one row's DAG (--row), or the rows that failed or match --where."""
    import json

    from flowkit.inspect import trace_view as it
    from flowkit.runs.folder import resolve_run_dir

    if (row is None) == (not failed and not conditions):
        raise UsageError("give --row N, or --failed and/or --where PATH<OP>VALUE")
    if node is not None and row is None:
        raise UsageError("--node needs --row")
    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    if row is not None:
        records = it.row_records(run_dir, row)
        output = it.row_output(run_dir, row)
        if not records and output is None:
            raise UsageError(f"run {run_dir.name} has no row {row}")
        if node is not None:
            records = it.select_node(records, node, row)
        if as_json:
            click.echo(json.dumps(records, indent=2, ensure_ascii=False, default=str))
        else:
            console.print(it.row_tree(records, output, row, max_chars=max_chars, verbose=verbose))
        return
    from flowkit.runs.folder import read_run_info

    flow_name = (read_run_info(run_dir).get("flow") or {}).get("name", "")
    parsed = it.check_paths([it.parse_where(c) for c in conditions], run_dir, flow_name)
    rows = it.where_rows(run_dir, parsed, only_failed=failed)
    if as_json:
        for rec in rows:
            click.echo(json.dumps(rec, ensure_ascii=False, default=str))
        return
    table, total = it.rows_table(rows, [c.path for c in parsed], limit=limit, max_chars=max_chars)
    console.print(table)
    shown = min(total, limit) if limit else total
    more = f" (showing {shown}; --limit 0 for all)" if shown < total else ""
    console.print(f"{total} row{'s' if total != 1 else ''} matched{more}")


@click.command()
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--key", help="Pair rows by this input column instead of by line.")
@click.option(
    "--metric", "metrics", multiple=True, metavar="NAME", help="Only this output (repeatable)."
)
@click.option(
    "--lower-is-better", multiple=True, metavar="NAME", help="A lower value of NAME is better."
)
@click.option("--resamples", default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", default=0, show_default=True, help="Bootstrap seed.")
@click.option("--top", default=10, show_default=True, help="Changed rows to list per output.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--fail-if",
    "fail_if",
    multiple=True,
    metavar="METRIC>MARGIN",
    help="Exit 1 when METRIC drops from A to B by more than MARGIN (a number or N%); METRIC "
    "alone: when the paired interval says it dropped.",
)
@ci_files
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def compare(
    run_a: str,
    run_b: str,
    key: str | None,
    metrics: tuple[str, ...],
    lower_is_better: tuple[str, ...],
    resamples: int,
    seed: int,
    top: int,
    as_json: bool,
    runs_dir: str,
    fail_if: tuple[str, ...] = (),
    summary: str | None = None,
    summary_file: str | None = None,
    junit: str | None = None,
) -> None:
    """Compare RUN_B with RUN_A: mean change per output with a paired bootstrap 95% CI."""
    from flowkit.cli.run_end import Checks, print_outcomes, write_ci_files
    from flowkit.inspect.compare import compare_runs, render
    from flowkit.inspect.regression import Baseline, judge, parse_drop, require_complete
    from flowkit.runs.folder import read_metrics, resolve_run_dir

    drops = [parse_drop(t, "--fail-if") for t in fail_if]
    dir_a, dir_b = (resolve_run_dir(r, Path(runs_dir)) for r in (run_a, run_b))
    checks = Checks(drops=drops, lower_is_better=lower_is_better, summary=summary)
    checks.summary_file, checks.junit = summary_file, junit
    for run_dir in (dir_a, dir_b) if drops else ():  # a gate on some rows only decides nothing
        require_complete(run_dir, "--fail-if")
    if drops or summary or summary_file:
        checks.baseline = Baseline.read(dir_a)
        checks.baseline.check(drops, "--fail-if")
    result = compare_runs(
        dir_a,
        dir_b,
        key=key,
        metrics=metrics,
        lower_is_better=lower_is_better,
        resamples=resamples,
        seed=seed,
        top=top,
    )
    from flowkit.cli.label_commands import corrected_differences, print_corrected, with_corrected

    corrected = corrected_differences(dir_a, dir_b)  # {} unless both runs have labels
    if as_json:
        click.echo(with_corrected(result.to_json(), corrected))
    else:
        console.print(render(result, dir_a, dir_b))
        print_corrected(corrected)
    if checks.baseline is None:
        return
    current = read_metrics(dir_b)
    checks.comparison = result
    outcomes = judge(drops, result, checks.baseline, current, lower_is_better, "fail-if")
    print_outcomes(outcomes)
    write_ci_files(f"flowkit compare {dir_a.name} → {dir_b.name}", current, checks, outcomes)
    if any(not o.passed for o in outcomes):
        raise SystemExit(1)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="The HTML file to write (default: report.html in the run folder; for a run in an "
    "object store, NAME-report.html here).",
)
@click.option("--compare", "compare_ref", metavar="RUN_B", help="Also compare RUN_B with RUN.")
@click.option("--key", help="With --compare: pair rows by this input column instead of by line.")
@click.option(
    "--lower-is-better", multiple=True, metavar="NAME", help="With --compare: lower NAME is better."
)
@click.option("--top", default=10, show_default=True, help="Changed rows to list per output.")
@click.option(
    "--max-rows",
    default=20_000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Rows in the table (failed rows extra).",
)
@click.option(
    "--max-trace-rows",
    default=1_000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Rows whose node trace is embedded.",
)
@click.option("--max-chars", default=2_000, show_default=True, help="Fold longer trace texts.")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def report(
    run_ref: str,
    output: str | None,
    compare_ref: str | None,
    key: str | None,
    lower_is_better: tuple[str, ...],
    top: int,
    max_rows: int,
    max_trace_rows: int,
    max_chars: int,
    runs_dir: str,
) -> None:
    """Write RUN as one self-contained HTML page: metrics, charts, rows and their traces."""
    from flowkit.inspect.report import Limits, write_report
    from flowkit.runs.folder import resolve_run_dir
    from flowkit.runs.remote import is_read_copy

    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    other = resolve_run_dir(compare_ref, Path(runs_dir)) if compare_ref else None
    default = run_dir / "report.html"
    if is_read_copy(run_dir):  # a downloaded copy, removed when this command ends
        default = Path(f"{run_dir.name}-report.html")
    written = write_report(
        run_dir,
        Path(output) if output else default,
        compare_with=other,
        key=key,
        lower_is_better=lower_is_better,
        top=top,
        limits=Limits(max_rows=max_rows, max_trace_rows=max_trace_rows, max_chars=max_chars),
    )
    console.print(
        f"report: {written.path} ({written.size / 1e6:.1f} MB; {written.rows_in_table:,} of "
        f"{written.rows:,} rows in the table, traces for {written.rows_traced:,})",
        highlight=False,
    )


@click.command(name="export-otel")
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--endpoint",
    metavar="URL",
    help="OTLP/HTTP collector, e.g. http://localhost:4318 (/v1/traces is added); "
    "default: $OTEL_EXPORTER_OTLP_ENDPOINT.",
)
@click.option("--console", "to_console", is_flag=True, help="Print the spans as JSON lines.")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def export_otel(run_ref: str, endpoint: str | None, to_console: bool, runs_dir: str) -> None:
    """Export a run's traces to OpenTelemetry: a span per run, row and node, with GenAI
    attributes for models and tokens (needs `pip install 'flowkit[otel]'`)."""
    from flowkit.inspect.otel import export_run

    summary = export_run(run_ref, endpoint=endpoint, console=to_console, runs_root=runs_dir)
    err_console.print(str(summary), highlight=False)


COMMANDS = (runs, show, trace, compare, report, export_otel)
