"""The `flowkit` command: a thin skin over the Python API.

User errors (FlowkitError) print as `error: …` with their exit code and no traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import click

from flowkit import __version__
from flowkit.cli.group import FlowkitGroup
from flowkit.cli.run_command import run
from flowkit.cli.terminal import console
from flowkit.errors import FlowkitError


@click.group(cls=FlowkitGroup)
@click.version_option(__version__, prog_name="flowkit")
def main() -> None:
    """Evaluate LLM applications with flows defined in YAML."""


main.add_command(run)


@main.command()
@click.argument("flows", nargs=-1, required=True)
def validate(flows: tuple[str, ...]) -> None:
    """Check FLOW files without running them; all problems are reported together."""
    from flowkit.code.static import inspect_only
    from flowkit.errors import ValidationError
    from flowkit.flow.loader import load_flow

    problems: list[str] = []
    for flow in flows:
        try:
            with inspect_only():  # checking a flow never runs its code
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
