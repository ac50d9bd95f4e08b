"""`flowkit validate` and `flowkit list`: check flow files without running them, list the
built-in flows."""

from __future__ import annotations

import click

from flowkit.cli.terminal import console, err_console
from flowkit.errors import FlowkitError


@click.command()
@click.argument("flows", nargs=-1, required=True)
def validate(flows: tuple[str, ...]) -> None:
    """Check FLOW files without running them; all problems are reported together."""
    from flowkit.code.static import inspect_only
    from flowkit.errors import ValidationError
    from flowkit.flow.loader import load_flow
    from flowkit.kinds.llm import prompt_warnings

    problems: list[str] = []
    for flow in flows:
        try:
            with inspect_only():  # checking a flow never runs its code
                loaded = load_flow(flow)
            console.print(f"ok: {flow} ({loaded.name}, {len(loaded.nodes)} nodes)")
            for warning in prompt_warnings(loaded):
                err_console.print(warning, highlight=False)
        except ValidationError as err:
            problems.extend(str(d) for d in err.diagnostics)
    if problems:
        raise ValidationErrorLines(problems)


class ValidationErrorLines(FlowkitError):
    exit_code = 2

    def __init__(self, lines: list[str]) -> None:
        n = len(lines)
        super().__init__(f"{n} problem{'s' if n != 1 else ''}\n" + "\n".join(lines))


@click.command(name="list")
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


COMMANDS = [validate, list_flows]
