"""The two consoles every command prints through: results on stdout, errors and progress on
stderr, so `flowkit … > file` keeps only results."""

from __future__ import annotations

from rich.console import Console

# Off a terminal (CI logs, pipes) rich would wrap at 80 columns and cut names; use a wide page.
err_console = Console(stderr=True, soft_wrap=True)
console = Console(width=None if Console().is_terminal else 160)
