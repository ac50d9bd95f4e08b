"""`flowkit run`'s `--variant` and `--variants` options, kept light (click only): the command
module imports this at start-up, the variant machinery (``variant_runs``) only when used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def variant_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--variants",
        "all_variants",
        type=click.Choice(["all"]),
        help="Run every variant of the nodes that have variants, each as its own run, and print "
        "their metrics side by side (docs/variants.md).",
    )(command)
    return click.option(
        "--variant",
        metavar="'${NODE.VARIANT}'",
        help="Run this variant of a node (its variants:, or Prompt Flow's node_variants).",
    )(command)


def take_variants(
    flows: list[str], variant: str | None, all_variants: str | None, name: str | None
) -> bool:
    """Apply `--variant` to this run (False: go on and run it), or run every variant (True)."""
    from flowkit.pfcompat import variant_runs

    if all_variants is not None:
        variant_runs.run_every_variant(click.get_current_context(), flows, name)
        return True
    variant_runs.choose(flows, str(variant))
    return False
