"""Glue between `flowkit run`'s Prompt Flow-style options and the habits module, plus the
commands Prompt Flow users reach for: `show-details`, `test` (`pf flow test`) and `convert`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from flowkit.cli.terminal import console
from flowkit.errors import UsageError
from flowkit.pfcompat.habits import (
    Habits,
    apply_environment,
    default_notices,
    is_pair,
    known_mapping,
    model_overrides,
    pairs,
    read_run_yaml,
)


def habits_of(
    flows: tuple[str, ...],
    flow_opt: str | None,
    run_file: str | None,
    data: str | None,
    prior_run: str | None,
    name: str | None,
    column_mapping: tuple[str, ...],
    connections: tuple[str, ...],
    env_vars: tuple[str, ...],
) -> Habits:
    """The run's flows, data, mapping… with the Prompt Flow options folded in; command-line
    values beat the run file's."""
    base = read_run_yaml(Path(run_file)) if run_file else Habits()
    # `--column-mapping a=x b=y`: click gives the pairs after the first to the FLOWS argument.
    extra = [a for a in flows if is_pair(a)] if (column_mapping or connections) else []
    plain = [a for a in flows if a not in extra]
    if flow_opt:
        plain.append(flow_opt)
    base.flows = plain or base.flows
    base.data = data or base.data
    base.prior_run = prior_run or base.prior_run
    base.name = name if name is not None else base.name  # "" is a name, and refused as one
    mapping_pairs = [*column_mapping, *(a for a in extra if "." not in a.partition("=")[0])]
    conn_pairs = [*connections, *(a for a in extra if "." in a.partition("=")[0])]
    base.mapping = {**base.mapping, **pairs(mapping_pairs, "--column-mapping")}
    base.connections = [*base.connections, *conn_pairs]
    base.environment = {**base.environment, **pairs(list(env_vars), "--environment-variables")}
    # Set in this process now, as Prompt Flow does, so that code imported while the flow loads
    # sees them too; the run records them and sets them again (RunConfig.environment).
    apply_environment(base.environment)
    base.model, base.connection = model_overrides(base.connections)
    return base


def finish_mapping(
    flow: Any, data: str | None, maps: dict[str, str], column_mapping: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    """--map plus the column mapping (unknown names warned about), and notes for the user."""
    from flowkit.data.read import peek_columns
    from flowkit.flow.formats import foreign_file
    from flowkit.pfcompat.dag import notices_for

    kept, warnings = known_mapping(column_mapping, flow.inputs)
    notes = [f"warning: {w}" for w in warnings]
    if foreign_file(flow.path) is None:
        return {**kept, **maps}, notes
    notes += [f"note: {n}" for n in notices_for(flow.path)]
    if data is not None:
        try:
            columns = peek_columns(data)
        except Exception:  # the run reports an unreadable data file itself
            columns = []
        notes += [f"note: {n}" for n in default_notices(flow, columns, {**kept, **maps})]
    return {**kept, **maps}, notes


@click.command()
@click.argument("source", type=click.Path(exists=True))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="The flow file to write."
)
def convert(source: str, output: str) -> None:
    """Write a Prompt Flow folder (or its flow.dag.yaml) as a native flowkit flow file."""
    from flowkit.pfcompat.convert import convert_folder

    written = convert_folder(Path(source), Path(output))
    console.print(f"wrote {written}")


@click.command(name="show-details")
@click.argument("run")
@click.option("-r", "--max-results", default=100, show_default=True, help="Rows to show.")
@click.option("--all-results", is_flag=True, help="Show every row.")
def show_details(run: str, max_results: int, all_results: bool) -> None:
    """A per-row table of RUN's inputs and outputs (as `pf run show-details`)."""
    from rich.table import Table

    from flowkit.data.jsonl import iter_jsonl
    from flowkit.runs.folder import resolve_run_dir

    rows = list(iter_jsonl(resolve_run_dir(run) / "outputs.jsonl"))
    rows.sort(key=lambda r: r.get("line", 0))
    if not all_results:
        rows = rows[:max_results]
    inputs = list(dict.fromkeys(k for r in rows for k in (r.get("inputs") or {})))
    outputs = list(dict.fromkeys(k for r in rows for k in (r.get("outputs") or {})))
    table = Table("line", *(f"inputs.{k}" for k in inputs), *(f"outputs.{k}" for k in outputs))
    for r in rows:
        ok = r.get("status") == "ok"
        cells = [_cell((r.get("inputs") or {}).get(k)) for k in inputs]
        cells += [_cell((r.get("outputs") or {}).get(k)) if ok else "(Failed)" for k in outputs]
        table.add_row(str(r.get("line")), *cells)
    console.print(table)


def _cell(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@click.command(name="test")
@click.argument("flow", required=False)
@click.option("--flow", "flow_opt", help="The flow, as an option (as `pf flow test`).")
@click.option("--inputs", multiple=True, metavar="NAME=VALUE", help="Input values (repeatable).")
@click.option(
    "--input",
    "input_file",
    type=click.Path(dir_okay=False, exists=True),
    help="A JSONL file: its first row is the input.",
)
@click.option("--model", help="Chat model for llm nodes that pin none (as `run --model`).")
@click.option("--connection", help="Connection (from flowkit.yaml) for llm nodes that pin none.")
@click.argument("more", nargs=-1)
def test_flow(
    flow: str | None,
    flow_opt: str | None,
    inputs: tuple[str, ...],
    input_file: str | None,
    more: tuple[str, ...],
    model: str | None = None,
    connection: str | None = None,
) -> None:
    """Run FLOW on one row (as `pf flow test`): --inputs k=v, else the inputs' defaults."""
    import tempfile

    from flowkit.api import run as run_flow
    from flowkit.data.read import iter_rows

    # `--inputs a=1 b=2`: click gives the pairs after the first to the positional arguments.
    positional = [a for a in (flow, *more) if a is not None]
    extra = [a for a in positional if is_pair(a)]
    target = flow_opt or next((a for a in positional if a not in extra), None)
    if target is None:
        raise UsageError("test needs a FLOW (or --flow FLOW)")
    row: dict[str, Any] = {}
    if input_file:
        first = next(iter(iter_rows(input_file, limit=1)), None)
        row.update(getattr(first, "values", None) or {})
    row.update(pairs([*inputs, *extra], "--inputs"))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "row.jsonl"
        data.write_text(json.dumps(row) + "\n", encoding="utf-8")
        result = run_flow(target, data, name=None, model=model, connection=connection)
    record = next(iter(result.rows()), {})
    if record.get("status") != "ok":
        err = (record.get("error") or {}).get("message")
        raise UsageError(f"the row failed: {err}", hint=f"flowkit trace {result.run_id} --row 0")
    console.print_json(json.dumps({**(record.get("outputs") or {})}, default=str))
    if result.metrics:
        console.print_json(json.dumps(result.metrics, default=str))


COMMANDS = [convert, show_details, test_flow]
