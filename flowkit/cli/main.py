"""The `flowkit` command: a thin skin over the Python API.

User errors (FlowkitError) print as `error: …` with their exit code and no traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import click

from flowkit import __version__
from flowkit.cli.group import FlowkitGroup
from flowkit.cli.run_command import run


@click.group(cls=FlowkitGroup)
@click.version_option(__version__, prog_name="flowkit")
def main() -> None:
    """Evaluate LLM applications with flows defined in YAML."""


main.add_command(run)
