"""The `flowkit` command: a thin skin over the Python API.

User errors (FlowkitError) print as `error: …` with their exit code and no traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from flowkit import __version__
from flowkit.errors import FlowkitError, UsageError
from flowkit.gates import check_gates, parse_gate
from flowkit.views import count_rows, metrics_table, progress_display, show_run

# Off a terminal (CI logs, pipes) rich would wrap at 80 columns and cut names; use a wide page.
err_console = Console(stderr=True, soft_wrap=True)
console = Console(width=None if Console().is_terminal else 160)


class FlowkitGroup(click.Group):
    """Turns FlowkitError into `error: …` and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FlowkitError as err:
            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
            sys.exit(err.exit_code)


@click.group(cls=FlowkitGroup)
@click.version_option(__version__, prog_name="flowkit")
def main() -> None:
    """Evaluate LLM applications with flows defined in YAML."""


def _parse_maps(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, ref = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(
                f"--map {item!r} must be NAME=VALUE, e.g. --map answer=${{data.response}}"
            )
        out[name.strip()] = ref.strip()
    return out


@main.command()
@click.argument("flows", nargs=-1)
@click.option(
    "--data",
    "data",
    type=click.Path(dir_okay=False),
    help="The rows: .jsonl, .json (a list) or .csv.",
)
@click.option(
    "--resume",
    "resume_run",
    metavar="RUN",
    help="Finish RUN in its folder: keep its finished rows, rerun failed and missing ones.",
)
@click.option(
    "--strict", is_flag=True, help="Stop before running if any data row is bad (default: skip it)."
)
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="NAME=REF",
    help="Fill flow input NAME from ${data.col}, ${run.outputs.x} or a literal.",
)
@click.option(
    "--run",
    "prior_run",
    type=click.Path(file_okay=False),
    help="An earlier run whose outputs ${run.outputs.x} reads, joined on line.",
)
@click.option("--concurrency", default=16, show_default=True, help="Rows in flight at once.")
@click.option("--limit", type=int, help="Run only the first N rows.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the node cache.")
@click.option("--refresh", multiple=True, metavar="NODE", help="Recompute this node (repeatable).")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where the cache lives.")
@click.option("--output", type=click.Path(file_okay=False), help="The run folder to write.")
@click.option("--name", help="The run's name (its folder under runs/).")
@click.option("--model", help="Chat model for llm nodes that pin none.")
@click.option("--connection", help="Connection (from flowkit.yaml) for llm nodes that pin none.")
@click.option("--timeout", type=float, help="Seconds per model request.")
@click.option(
    "--fail-on-error",
    type=float,
    metavar="RATIO",
    help="Exit 1 when more than this fraction of rows failed.",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="METRIC<OP>VALUE",
    help="A CI gate such as 'groundedness.mean>=4'; exit 1 when it does not hold.",
)
@click.option(
    "--backend",
    default="local",
    show_default=True,
    type=click.Choice(["local", "loky", "threading", "multiprocessing", "dask", "ray"]),
    help="Where rows run: this process, or joblib workers (see README, Running at scale).",
)
@click.option(
    "--workers", default=2, show_default=True, help="joblib workers (non-local backends)."
)
@click.option("--scheduler", help="Dask scheduler address, with --backend dask.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--otel",
    is_flag=True,
    help="At the end, export the run's traces to OpenTelemetry (as `flowkit export-otel`).",
)
def run(
    flows: tuple[str, ...],
    data: str | None,
    resume_run: str | None,
    strict: bool,
    maps: tuple[str, ...],
    prior_run: str | None,
    concurrency: int,
    limit: int | None,
    no_cache: bool,
    refresh: tuple[str, ...],
    cache_dir: str | None,
    output: str | None,
    name: str | None,
    model: str | None,
    connection: str | None,
    timeout: float | None,
    fail_on_error: float | None,
    gates: tuple[str, ...],
    backend: str,
    workers: int,
    scheduler: str | None,
    quiet: bool,
    otel: bool,
) -> None:
    """Run FLOW (a path or a built-in name; several run together) over --data.

    With --resume RUN, finish an earlier run instead: its flow, data and options are reused.
    """
    from flowkit.api import resume as resume_flow
    from flowkit.api import run as run_flow
    from flowkit.loader import load_flows
    from flowkit.runs import read_run_info, resolve_run_dir

    parsed_gates = [parse_gate(g) for g in gates]
    if otel:
        from flowkit.otel import require

        require()  # a missing extra is reported before the rows run, not after
    if resume_run is not None:
        _only_with_resume(click.get_current_context(), flows, data)
        info = read_run_info(resolve_run_dir(resume_run))
        limit = info.get("options", {}).get("limit")
        total = count_rows(Path(info.get("invocation", {}).get("data", "")), limit)
        with progress_display(err_console, enabled=not quiet, total=total) as on_progress:
            result = resume_flow(
                resume_run,
                concurrency=concurrency if _given("concurrency") else None,
                on_progress=on_progress,
            )
    else:
        if not flows or data is None:
            raise UsageError(
                "run needs a FLOW and --data (or --resume RUN)",
                hint="e.g. flowkit run flows/f1_score.yaml --data examples/qa.jsonl",
            )
        flow = load_flows(list(flows))
        total = count_rows(Path(data), limit)
        with progress_display(err_console, enabled=not quiet, total=total) as on_progress:
            result = run_flow(
                flow,
                data,
                mapping=_parse_maps(maps),
                prior_run=prior_run,
                concurrency=concurrency,
                limit=limit,
                use_cache=not no_cache,
                refresh=list(refresh),
                cache_dir=cache_dir,
                output=output,
                name=name,
                model=model,
                connection=connection,
                timeout=timeout,
                on_progress=on_progress,
                backend=backend,
                workers=workers,
                scheduler=scheduler,
                strict=strict,
            )
    for notice in result.info.get("notices") or ():
        err_console.print(f"note: {escape(notice)}", highlight=False)
    if result.counts.get("bad_input"):
        _report_bad_rows(result)
    console.print(metrics_table(result.metrics, result.info))
    c = result.counts
    console.print(
        f"rows {c['rows']}: {c['succeeded']} ok, {c['failed']} failed, "
        f"{c['bad_input']} bad input; cache hits {c['cache_hits']}"
    )
    console.print(f"run folder: {result.run_dir}")
    if otel:  # before the gates, so a failing CI run is exported too
        from flowkit.otel import export_run

        err_console.print(str(export_run(result.run_dir)), highlight=False)
    if fail_on_error is not None and result.failed_ratio > fail_on_error:
        err_console.print(
            f"[bold red]error:[/] {result.failed_ratio:.1%} of rows failed, "
            f"more than --fail-on-error {fail_on_error}"
        )
        sys.exit(1)
    check_gates(parsed_gates, result.metrics, err_console)


def _report_bad_rows(result: Any, shown: int = 5) -> None:
    """Bad data rows were skipped, not run: say which, so they are not mistaken for scores."""
    bad = [r for r in result.rows() if r.get("status") == "bad_input"]
    err_console.print(
        f"warning: {len(bad)} bad data row(s) were not run (--strict stops on them instead):",
        highlight=False,
    )
    for row in bad[:shown]:
        err_console.print(f"  {escape(str((row.get('error') or {}).get('message')))}")
    if len(bad) > shown:
        more = len(bad) - shown
        err_console.print(f"  … and {more} more: flowkit trace {result.run_id} --failed")


# Options that say what to run; a resume takes them from the run it finishes.
_RUN_DEFINING = (
    "maps",
    "prior_run",
    "limit",
    "no_cache",
    "refresh",
    "cache_dir",
    "output",
    "name",
    "model",
    "connection",
    "timeout",
    "backend",
    "workers",
    "scheduler",
    "strict",
)


def _given(param: str) -> bool:
    source = click.get_current_context().get_parameter_source(param)
    return source is not None and source != click.core.ParameterSource.DEFAULT


def _only_with_resume(ctx: click.Context, flows: tuple[str, ...], data: str | None) -> None:
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    clashing = [flags[p] for p in _RUN_DEFINING if _given(p)]
    if flows or data is not None:
        clashing.insert(0, "FLOW/--data")
    if clashing:
        raise UsageError(
            f"--resume reuses the run's own flow, data and options; drop {', '.join(clashing)}",
            hint="to change them, start a new run (the cache keeps finished nodes free)",
        )


@main.command()
@click.argument("flows", nargs=-1, required=True)
def validate(flows: tuple[str, ...]) -> None:
    """Check FLOW files without running them; all problems are reported together."""
    from flowkit.errors import ValidationError
    from flowkit.loader import load_flow

    problems: list[str] = []
    for flow in flows:
        try:
            loaded = load_flow(flow)
            console.print(f"ok: {flow} ({loaded.name}, {len(loaded.nodes)} nodes)")
        except ValidationError as err:
            problems.extend(str(d) for d in err.diagnostics)
    if problems:
        raise ValidationErrorLines(problems)


class ValidationErrorLines(FlowkitError):
    exit_code = 2

    def __init__(self, lines: list[str]) -> None:
        n = len(lines)
        super().__init__(f"{n} problem{'s' if n != 1 else ''}\n" + "\n".join(lines))


@main.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def show(run_ref: str, runs_dir: str) -> None:
    """Show a run: status, counts, scores, metrics, tokens and cost, slowest nodes, errors."""
    show_run(console, run_ref, Path(runs_dir))


@main.command(name="list")
def list_flows() -> None:
    """List the built-in flows."""
    from rich.table import Table

    from flowkit.builtin import builtin_flows
    from flowkit.source import read_yaml

    table = Table("flow", "description", box=None)
    for name, path in builtin_flows().items():
        try:
            raw = read_yaml(path)
            desc = str(raw.get("description", "")) if isinstance(raw, dict) else ""
        except Exception:
            desc = "(cannot read)"
        table.add_row(name, desc)
    console.print(table)


@main.command()
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def runs(runs_dir: str) -> None:
    """List the runs in runs/, newest first."""
    from flowkit.views import runs_table

    console.print(runs_table(Path(runs_dir)))


@main.command()
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

    from flowkit import inspect_trace as it
    from flowkit.runs import resolve_run_dir

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
    parsed = [it.parse_where(c) for c in conditions]
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


@main.command()
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
) -> None:
    """Compare RUN_B with RUN_A: mean change per output with a paired bootstrap 95% CI."""
    from flowkit.compare import compare_runs, render
    from flowkit.runs import resolve_run_dir

    dir_a, dir_b = (resolve_run_dir(r, Path(runs_dir)) for r in (run_a, run_b))
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
    if as_json:
        click.echo(result.to_json())
    else:
        console.print(render(result, dir_a, dir_b))


@main.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--output",
    "-o",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The HTML file to write.",
)
@click.option("--compare", "compare_ref", metavar="RUN_B", help="Also compare RUN_B with RUN.")
@click.option("--key", help="With --compare: pair rows by this input column instead of by line.")
@click.option(
    "--lower-is-better", multiple=True, metavar="NAME", help="With --compare: lower NAME is better."
)
@click.option("--top", default=10, show_default=True, help="Changed rows to list per output.")
@click.option(
    "--max-rows", default=20_000, show_default=True, help="Rows in the table (failed rows extra)."
)
@click.option(
    "--max-trace-rows", default=1_000, show_default=True, help="Rows whose node trace is embedded."
)
@click.option("--max-chars", default=2_000, show_default=True, help="Fold longer trace texts.")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def report(
    run_ref: str,
    output: str,
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
    from flowkit.report import Limits, write_report
    from flowkit.runs import resolve_run_dir

    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    other = resolve_run_dir(compare_ref, Path(runs_dir)) if compare_ref else None
    written = write_report(
        run_dir,
        Path(output),
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


@main.command(name="export-otel")
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
    from flowkit.otel import export_run

    summary = export_run(run_ref, endpoint=endpoint, console=to_console, runs_root=runs_dir)
    err_console.print(str(summary), highlight=False)


if __name__ == "__main__":
    main()
