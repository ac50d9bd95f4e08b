"""Option values as `flowkit run` parses them: bounded finite numbers (``_Number``) and
``--map NAME=VALUE`` pairs; a bad one is a one-line usage error (exit 2) naming the option.
"""

from __future__ import annotations

import math
from typing import Any

import click

from flowkit.errors import UsageError


class _Number(click.ParamType):
    """A finite number (never NaN or infinite) at least ``low``, or more than it (``open_low``),
    and at most ``high``; anything else is a one-line usage error (exit 2)."""

    name = "number"

    def __init__(
        self,
        kind: type[int] | type[float],
        low: float,
        *,
        open_low: bool = False,
        high: float | None = None,
    ) -> None:
        self.kind, self.low, self.open_low, self.high = kind, low, open_low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        what = "a whole number" if self.kind is int else "a number"
        bound = f"more than {self.low:g}" if self.open_low else f"at least {self.low:g}"
        if self.high is not None:
            bound += f" and at most {self.high:g}"
        try:
            number = value if isinstance(value, self.kind) else self.kind(str(value).strip())
        except ValueError:
            number = None
        if (
            number is None
            or not math.isfinite(number)
            or number < self.low
            or (self.open_low and number == self.low)
            or (self.high is not None and number > self.high)
        ):
            opt = param.opts[0] if param is not None and param.opts else "the value"
            raise UsageError(f"{opt} must be {what} {bound}, not {value!r}")
        return number


def _parse_maps(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, ref = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(
                f"--map {item!r} must be NAME=VALUE, e.g. --map answer=${{data.response}}"
            )
        out[name.strip()] = ref.strip()
    return out


def label_options(command: Any) -> Any:
    """`flowkit run`'s `--labels FILE` and `--key COLUMN` (flowkit.cli.label_commands)."""
    command = click.option(
        "--key", "labels_key", help="With --labels: the column matching labels to rows."
    )(command)
    return click.option(
        "--labels",
        "labels_file",
        type=click.Path(dir_okay=False),
        help="People's labels (JSONL): add corrected metrics (….corrected) to metrics.json.",
    )(command)
