"""Commands for writing flows: `flowkit describe FLOW` and `flowkit init DIR`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from flowkit.cli.terminal import console


@click.command()
@click.argument("flow_ref", metavar="FLOW")
def describe(flow_ref: str) -> None:
    """Show FLOW's inputs (types, defaults), outputs, metrics and the data columns it reads."""
    from rich.table import Table

    from flowkit.code.static import inspect_only
    from flowkit.data.needs import ALIASES, requirements, shapes_text
    from flowkit.flow.loader import load_flow
    from flowkit.inspect.gates import aggregate_nodes

    with inspect_only():  # describing a flow never runs its code
        flow = load_flow(flow_ref)
    console.print(Text.assemble((flow.name, "bold"), f" ({flow.path})"), highlight=False)
    if flow.spec.description:
        console.print(str(flow.spec.description).strip(), highlight=False)
    inputs = Table(
        "input", "type", "default", "description", box=None, title="inputs", title_justify="left"
    )
    for name, spec in flow.inputs.items():
        default = "required" if spec.required else repr(spec.default)
        inputs.add_row(name, spec.type, default, spec.description or "")
    outputs = Table("output", "from", box=None, title="outputs (per row)", title_justify="left")
    for name, ref in flow.outputs.items():
        outputs.add_row(name, ref.text)
    metrics = Table("metric names", "computed by", box=None, title="metrics", title_justify="left")
    for prefix, node in aggregate_nodes(flow):
        metrics.add_row(f"{prefix}.*", str(node.spec.function))
    console.print(inputs, outputs, metrics)
    # A row must fill one shape of each need: those inputs are required in one of the forms.
    needs = [shapes_text(shapes) for _, shapes in requirements(flow)]
    shaped = {n for _, shapes in requirements(flow) for shape in shapes for n in shape}
    required = [n for n, s in flow.inputs.items() if s.required]
    optional = [n for n, s in flow.inputs.items() if not s.required and n not in shaped]
    console.print(
        f"data columns: {'; '.join(filter(None, [', '.join(required), *needs])) or 'none'} "
        "required"
        + (f"; {', '.join(optional)} optional" if optional else "")
        + " (map others with --map INPUT='${data.COLUMN}')",
        highlight=False,
    )
    aliased = {n: ALIASES[n] for n in flow.inputs if n in ALIASES}
    if aliased:
        console.print(
            "read from other tools' names when the data lacks the input's own: "
            + "; ".join(f"{n} ← {', '.join(cols)}" for n, cols in aliased.items()),
            highlight=False,
        )


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Start a project in DIRECTORY: a custom metric flow (a python node and an llm judge),
    its prompt, sample data and a flowkit.yaml."""
    from flowkit.cli.scaffold import scaffold

    for path in scaffold(directory):
        console.print(f"wrote {path}", highlight=False)
    console.print(
        f"next: cd {directory} && flowkit run supported.yaml --data data.jsonl "
        "(with OPENAI_API_KEY set, and OPENAI_BASE_URL for a non-OpenAI endpoint)",
        highlight=False,
    )


COMMANDS = (describe, init)
