"""The `flowkit` command: a thin skin over the Python API.

User errors (FlowkitError) print as `error: …` with their exit code and no traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from flowkit import __version__
from flowkit.cli.group import FlowkitGroup
from flowkit.cli.options import _Number, _parse_maps, label_options
from flowkit.cli.terminal import console, err_console, styled
from flowkit.errors import FlowkitError, UsageError
from flowkit.pfcompat.variant_options import take_variants, variant_options


@click.group(cls=FlowkitGroup)
@click.version_option(__version__, prog_name="flowkit")
def main() -> None:
    """Evaluate LLM applications with flows defined in YAML."""


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
    "--resume-from",
    "resume_run",
    metavar="RUN",
    help="Finish RUN in its folder: keep its finished rows, rerun failed and missing ones.",
)
@click.option(
    "--allow-changes",
    is_flag=True,
    help="With --resume: go on although a node's model, params or prompt changed since the "
    "run; every row runs again, the cache answering each unchanged node.",
)
@click.option("--flow", "flow_opt", metavar="FLOW", help="The flow, as an option (as `pf run`).")
@click.option(
    "-f",
    "--file",
    "run_file",
    type=click.Path(dir_okay=False, exists=True),
    help="A Prompt Flow run YAML (flow, data, run, column_mapping, connections, env).",
)
@click.option(
    "--column-mapping",
    "column_mapping",
    multiple=True,
    metavar="NAME=REF",
    help="As --map; several pairs may follow one flag; unknown names are only warned about.",
)
@click.option(
    "--connections",
    "pf_connections",
    multiple=True,
    metavar="NODE.KEY=VALUE",
    help="NODE.deployment_name / NODE.model / NODE.connection: as --model / --connection.",
)
@click.option(
    "--environment-variables",
    "env_vars",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set these environment variables for the run.",
)
@click.option("--stream", is_flag=True, help="Accepted for Prompt Flow habits; progress shows.")
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
@click.option(
    "--target",
    metavar="MODULE:FUNCTION|FLOW",
    help="Call this app (a python callable or an app flow) per row and judge its answers.",
)
@click.option(
    "--concurrency",
    default=16,
    show_default=True,
    type=_Number(int, 1),
    help="Rows in flight at once, and each endpoint's requests in flight.",
)
@click.option("--limit", type=_Number(int, 0), help="Run only the first N rows.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the node cache.")
@click.option("--refresh", multiple=True, metavar="NODE", help="Recompute this node (repeatable).")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where the cache lives.")
@click.option("--output", type=click.Path(file_okay=False), help="The run folder to write.")
@click.option("--overwrite", is_flag=True, help="Replace the run in an existing --output/--name.")
@click.option("-n", "--name", help="The run's name (its folder under runs/).")
@click.option("--model", help="Chat model for llm nodes that pin none.")
@click.option("--embedding-model", help="Embeddings model for embedding nodes that pin none.")
@click.option("--connection", help="Connection (from flowkit.yaml) for llm nodes that pin none.")
@click.option("--timeout", type=_Number(float, 0, open_low=True), help="Seconds per model request.")
@click.option(
    "--fail-on-error",
    type=_Number(float, 0, high=1),
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
@label_options  # --labels FILE, --key COLUMN (flowkit.cli.options)
@click.option(
    "--backend",
    default="local",
    show_default=True,
    type=click.Choice(["local", "loky", "threading", "multiprocessing", "dask", "ray"]),
    help="Where rows run: this process, or joblib workers (see README, Running at scale).",
)
@click.option(
    "--workers",
    default=2,
    show_default=True,
    type=_Number(int, 1),
    help="joblib workers (non-local backends).",
)
@click.option("--scheduler", help="Dask scheduler address, with --backend dask.")
@click.option(
    "--trace",
    "trace_level",
    default="compact",
    show_default=True,
    type=click.Choice(["full", "compact"]),
    help="What traces.jsonl keeps: everything, or python nodes' successes without their "
    "inputs (see README, Traces).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@variant_options  # --variant, --variants all (flowkit.pfcompat.variant_runs)
@click.option(
    "--otel",
    is_flag=True,
    help="At the end, export the run's traces to OpenTelemetry (as `flowkit export-otel`).",
)
def run(
    flows: tuple[str, ...],
    data: str | None,
    resume_run: str | None,
    allow_changes: bool,
    flow_opt: str | None,
    run_file: str | None,
    column_mapping: tuple[str, ...],
    pf_connections: tuple[str, ...],
    env_vars: tuple[str, ...],
    stream: bool,
    strict: bool,
    maps: tuple[str, ...],
    prior_run: str | None,
    target: str | None,
    concurrency: int,
    limit: int | None,
    no_cache: bool,
    refresh: tuple[str, ...],
    cache_dir: str | None,
    output: str | None,
    name: str | None,
    model: str | None,
    embedding_model: str | None,
    connection: str | None,
    timeout: float | None,
    fail_on_error: float | None,
    gates: tuple[str, ...],
    backend: str,
    workers: int,
    scheduler: str | None,
    quiet: bool,
    otel: bool,
    overwrite: bool = False,
    trace_level: str = "compact",
    labels_file: str | None = None,
    labels_key: str | None = None,
    variant: str | None = None,
    all_variants: str | None = None,
) -> None:
    """Run FLOW (a path or a built-in name; several run together) over --data.

    With --resume RUN, finish an earlier run instead: its flow, data and options are reused.
    """
    from flowkit.api import resume as resume_flow
    from flowkit.api import run_configured
    from flowkit.cli.label_commands import add_labels, check_labels
    from flowkit.cli.run_end import exit_if_valueless, report_end
    from flowkit.flow.loader import load_flows
    from flowkit.inspect.gates import check_gate_names, check_gates, parse_gate
    from flowkit.inspect.show import count_rows, progress_display
    from flowkit.runs.config import RunConfig, recorded_config
    from flowkit.runs.folder import read_run_info, resolve_run_dir

    parsed_gates = [parse_gate(g) for g in gates]
    check_labels(labels_file, labels_key, parsed_gates)
    from flowkit.pfcompat.cli import finish_mapping, habits_of

    habits = habits_of(
        flows, flow_opt, run_file, data, prior_run, name, column_mapping, pf_connections, env_vars
    )
    flows, data, prior_run, name = tuple(habits.flows), habits.data, habits.prior_run, habits.name
    model, connection = model or habits.model, connection or habits.connection
    for warning in habits.warnings:
        err_console.print("warning:", warning, highlight=False)
    if (variant or all_variants) and take_variants(list(flows), variant, all_variants, name):
        return  # every variant ran, each as its own run
    if otel:
        from flowkit.inspect.otel import require

        require()  # a missing extra is reported before the rows run, not after
    if resume_run is not None:
        _only_with_resume(click.get_current_context(), flows, data)
        info = read_run_info(resolve_run_dir(resume_run))
        limit = recorded_config(info).limit
        total = count_rows(Path(info.get("invocation", {}).get("data", "")), limit)
        with progress_display(err_console, enabled=not quiet, total=total) as on_progress:
            result = resume_flow(
                resume_run,
                concurrency=concurrency if _given("concurrency") else None,
                allow_changes=allow_changes,
                on_progress=on_progress,
            )
    else:
        if allow_changes:
            raise UsageError("--allow-changes goes with --resume RUN only")
        if not flows or data is None:
            raise UsageError(
                "run needs a FLOW and --data (or --resume RUN)",
                hint="e.g. flowkit run flows/f1_score.yaml --data examples/qa.jsonl",
            )
        flow = load_flows(list(flows))
        mapping, notes = finish_mapping(flow, data, _parse_maps(maps), habits.mapping)
        if target is not None:  # the app's latency metrics are the wrapped flow's too
            from flowkit.api import with_target

            flow = with_target(flow, target, data)
        check_gate_names(parsed_gates, flow)
        for note in notes:
            err_console.print(note, highlight=False)
        config = RunConfig.of(
            mapping=mapping or None,
            prior_run=prior_run,
            concurrency=concurrency,
            limit=limit,
            use_cache=not no_cache,
            refresh=refresh,
            cache_dir=cache_dir,
            output=output,
            name=name,
            model=model,
            connection=connection,
            embedding_model=embedding_model,
            timeout=timeout,
            backend=backend,
            workers=workers,
            scheduler=scheduler,
            strict=strict,
            target=target,
            overwrite=overwrite,
            trace=trace_level,
            environment=habits.environment,
        )
        total = count_rows(Path(data), limit)
        with progress_display(err_console, enabled=not quiet, total=total) as on_progress:
            result = run_configured(flow, data, config, on_progress=on_progress)
    report_end(result)
    if otel:  # before the gates, so a failing CI run is exported too
        from flowkit.inspect.otel import export_run

        err_console.print(str(export_run(result.run_dir)), highlight=False)
    if fail_on_error is not None and result.failed_ratio > fail_on_error:
        err_console.print(
            styled("[bold red]error:[/]"),
            f"{result.failed_ratio:.1%} of rows failed, more than --fail-on-error {fail_on_error}",
        )
        sys.exit(1)
    if labels_file is not None:
        result.metrics.update(add_labels(result.run_dir, labels_file, labels_key))
    check_gates(parsed_gates, result.metrics, err_console)
    exit_if_valueless(result)


# Options that say what to run; a resume takes them from the run it finishes.
_RUN_DEFINING = (
    "maps",
    "column_mapping",
    "run_file",
    "flow_opt",
    "pf_connections",
    "env_vars",
    "prior_run",
    "limit",
    "no_cache",
    "refresh",
    "cache_dir",
    "output",
    "name",
    "model",
    "embedding_model",
    "connection",
    "target",
    "timeout",
    "backend",
    "workers",
    "scheduler",
    "strict",
    "overwrite",
    "trace_level",
    "variant",
    "all_variants",
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
    from flowkit.flow.loader import load_flow

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


@main.command(name="list")
def list_flows() -> None:
    """List the built-in flows."""
    from rich.table import Table

    from flowkit.flow.builtin import builtin_flows
    from flowkit.flow.source import read_yaml

    table = Table("flow", "description", box=None)
    for name, path in builtin_flows().items():
        try:
            raw = read_yaml(path)
            desc = str(raw.get("description", "")) if isinstance(raw, dict) else ""
        except Exception:
            desc = "(cannot read)"
        table.add_row(name, desc)
    console.print(table)
