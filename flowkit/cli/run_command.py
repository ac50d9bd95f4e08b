"""`flowkit run`: its options, and how they become a RunConfig for the Python API.

A thin skin over ``flowkit.api``: the options are parsed and checked here, gates and CI files are
handled by ``run_end``, and everything else happens in the API.
"""

from __future__ import annotations

from pathlib import Path

import click

from flowkit.cli.options import (
    _Number,
    _parse_maps,
    baseline_apart,
    ci_options,
    drop_gates,
    scale_out_options,
)
from flowkit.cli.terminal import err_console
from flowkit.errors import UsageError
from flowkit.pfcompat.variant_options import take_variants, variant_options


@click.command()
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
    default=0.0,
    show_default=True,
    metavar="RATIO",
    help="Exit 1 when more than this fraction of rows failed or were bad input (1: never).",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="METRIC<OP>VALUE",
    help="A CI gate such as 'groundedness.mean>=4'; exit 1 when it does not hold.",
)
@ci_options
@click.option(
    "--labels",
    "labels_file",
    type=click.Path(dir_okay=False),
    help="People's labels (JSONL): add corrected metrics (….corrected) to metrics.json.",
)
@click.option("--key", "labels_key", help="With --labels: the column matching labels to rows.")
@scale_out_options
@click.option(
    "--trace",
    "trace_level",
    default="compact",
    show_default=True,
    type=click.Choice(["full", "compact"]),
    help="What traces.jsonl keeps: everything, or python nodes' successes without their "
    "inputs (see docs/reference.md, Traces).",
)
@click.option(
    "--batch",
    is_flag=True,
    help="Send llm calls through the provider's batch API: half the price, replies within "
    "24 h (see docs/batch.md).",
)
@click.option(
    "--batch-fallback",
    type=click.Choice(["none", "online"]),
    default="none",
    help="With --batch, a call no batch answered within the retries: fail it, or ask online.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@variant_options  # --variant, --variants all (flowkit.pfcompat.variant_runs)
@click.option("--verbose", "-v", is_flag=True, help="Also print the run's notes (run.json).")
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
    chunk_size: int | None,
    quiet: bool,
    otel: bool,
    batch: bool = False,
    batch_fallback: str = "none",
    overwrite: bool = False,
    trace_level: str = "compact",
    labels_file: str | None = None,
    labels_key: str | None = None,
    variant: str | None = None,
    all_variants: str | None = None,
    baseline: str | None = None,
    gate_drops: tuple[str, ...] = (),
    lower_is_better: tuple[str, ...] = (),
    summary: str | None = None,
    summary_file: str | None = None,
    junit: str | None = None,
    verbose: bool = False,
) -> None:
    """Run FLOW (a path or a built-in name; several run together) over --data.

    With --resume RUN, finish an earlier run instead: its flow, data and options are reused.
    """
    from flowkit.api import resume as resume_flow
    from flowkit.api import run_configured
    from flowkit.cli.label_commands import add_labels, check_labels
    from flowkit.cli.run_end import Checks, check_run, report_end
    from flowkit.flow.loader import load_flows
    from flowkit.inspect.gates import Gate, check_gate_names, parse_gate
    from flowkit.inspect.show import count_rows, progress_display
    from flowkit.kinds.llm import prompt_warnings
    from flowkit.runs.config import RunConfig, recorded_config
    from flowkit.runs.folder import read_run_info, resolve_run_dir

    checks = Checks(
        gates=[parse_gate(g) for g in gates],
        drops=drop_gates(gate_drops, baseline, lower_is_better),
        lower_is_better=lower_is_better,
        fail_on_error=fail_on_error,
        otel=otel,
        summary=summary,
        summary_file=summary_file,
        junit=junit,
    )
    check_labels(labels_file, labels_key, checks.gates, resume_run)
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
    if baseline is not None:  # read and checked before the first row
        from flowkit.inspect.regression import Baseline, require_complete

        require_complete(resolve_run_dir(baseline), "--baseline")
        checks.baseline = Baseline.read(resolve_run_dir(baseline))
        baseline_apart(checks.baseline.run_dir, output, name, resume_run)
        checks.baseline.check(checks.drops, "--gate-drop")
        checks.baseline.check_lower(lower_is_better)
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
        for warning in prompt_warnings(flow):  # before the run: a prompt blind to an input
            err_console.print(warning, highlight=False)
        mapping, notes = finish_mapping(flow, data, _parse_maps(maps), habits.mapping)
        if target is not None:  # the app's latency metrics are the wrapped flow's too
            from flowkit.api import with_target

            flow = with_target(flow, target, data)
        unchecked = check_gate_names(checks.gates, flow)
        if checks.baseline is not None:  # a drop gate on a metric this flow cannot produce
            aggregates = [d.metric for d in checks.drops if d.metric in checks.baseline.metrics]
            drops = [Gate(m, ">", 0.0) for m in aggregates]
            unchecked += check_gate_names(drops, flow, "--gate-drop")
        for warning in dict.fromkeys(unchecked):  # two gates on one metric: one warning
            err_console.print(warning, highlight=False)
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
            chunk_size=chunk_size,
            strict=strict,
            target=target,
            overwrite=overwrite,
            trace=trace_level,
            environment=habits.environment,
            batch=batch,
            batch_fallback=batch_fallback,
        )
        total = count_rows(Path(data), limit)
        with progress_display(err_console, enabled=not quiet, total=total) as on_progress:
            result = run_configured(flow, data, config, on_progress=on_progress)
    report_end(result, verbose)
    if labels_file is not None:
        result.metrics.update(add_labels(result.run_dir, labels_file, labels_key))
    elif resume_run is not None and (result.run_dir / "labels.jsonl").is_file():
        # a resumed run rewrites metrics.json: its own labels correct it again
        own = str(result.run_dir / "labels.jsonl")
        result.metrics.update(add_labels(result.run_dir, own, "line"))
    check_run(result, checks)


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
    "chunk_size",
    "strict",
    "overwrite",
    "trace_level",
    "variant",
    "all_variants",
    "batch",
    "batch_fallback",
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
