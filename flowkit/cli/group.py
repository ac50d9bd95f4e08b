"""The `flowkit` command group: how a user error ends a command, and which commands load lazily."""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
from typing import Any

import click

from flowkit.cli.terminal import err_console, styled
from flowkit.errors import FlowkitError

# Commands that live in modules of their own, loaded when named (or listed by --help): a run
# never pays for importing the inspection and authoring commands.
_LAZY = {
    "flowkit.cli.inspect_commands": ("runs", "show", "trace", "compare", "report", "export-otel"),
    "flowkit.cli.author_commands": ("describe", "init"),
    "flowkit.cli.label_commands": ("agree", "review"),
    "flowkit.cli.batch_commands": ("batches",),
    "flowkit.cli.flow_commands": ("validate", "list"),
    "flowkit.pfcompat.cli": ("convert", "show-details", "test"),
}


class FlowkitGroup(click.Group):
    """Turns FlowkitError into `error: …` and its exit code; loads the lazy commands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(n for ns in _LAZY.values() for n in ns)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for module, names in _LAZY.items():
            if cmd_name in names and cmd_name not in self.commands:
                for command in importlib.import_module(module).COMMANDS:
                    self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FlowkitError as err:
            _quiet_ctrl_c()
            err_console.print(styled("[bold red]error:[/]"), str(err), highlight=False)
            sys.exit(err.exit_code)
        except KeyboardInterrupt:  # a Ctrl-C outside a run's own handling: still 130
            _quiet_ctrl_c()
            err_console.print(styled("[bold red]error:[/]"), "interrupted", highlight=False)
            sys.exit(130)


def _quiet_ctrl_c() -> None:
    """The command is ending with its own exit code: a further Ctrl-C (a held key) must not
    turn that into click's `Aborted!` and exit 1."""
    with contextlib.suppress(ValueError):  # not the main thread (an embedding caller)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
