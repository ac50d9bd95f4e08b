"""``flowkit batches RUN [--cancel]``: a run's batches (flowkit.batch) and their status."""

from __future__ import annotations

from pathlib import Path

import click

from flowkit.cli.terminal import console


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--cancel", is_flag=True, help="Cancel the run's unfinished batches (their calls are lost)."
)
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def batches(run_ref: str, cancel: bool, runs_dir: str) -> None:
    """List the batches a run in batch mode sent, with their status at the provider now."""
    from rich.table import Table

    from flowkit.batch.commands import batch_table
    from flowkit.runs.folder import resolve_run_dir

    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    rows = batch_table(run_dir, cancel=cancel)
    if not rows:
        console.print(f"run {run_dir.name!r} sent no batch", highlight=False)
        return
    columns = ("batch", "connection", "calls", "status", "completed", "failed")
    table = Table(*columns)
    for row in rows:
        table.add_row(*(str(row[k]) for k in columns))
    console.print(table)


COMMANDS = (batches,)
