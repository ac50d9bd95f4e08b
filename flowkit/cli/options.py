"""Option values as `flowkit run` parses them: bounded finite numbers (``_Number``) and
``--map NAME=VALUE`` pairs; a bad one is a one-line usage error (exit 2) naming the option.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from flowkit.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


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


def ci_options(command: F) -> F:
    """`run`'s options for CI: a baseline, gates on the drop from it, and the files CI reads."""
    return ci_files(_apply(_CI_OPTIONS, command))


def ci_files(command: F) -> F:
    """The files a CI job reads (`run` and `compare` alike): a markdown summary, JUnit XML."""
    return _apply(_CI_FILES, command)


def _apply(options: list[Any], command: F) -> F:
    """``options`` on ``command``, in the order listed (as stacked decorators would read)."""
    for option in reversed(options):
        command = option(command)
    return command


_CI_OPTIONS = [
    click.option(
        "--baseline",
        metavar="RUN",
        help="An earlier run to compare with: --gate-drop and --summary read it.",
    ),
    click.option(
        "--gate-drop",
        "gate_drops",
        multiple=True,
        metavar="METRIC>MARGIN",
        help="With --baseline: exit 1 when METRIC drops by more than MARGIN (a number or N%); "
        "METRIC alone: when the paired interval says it dropped.",
    ),
    click.option(
        "--lower-is-better",
        multiple=True,
        metavar="METRIC",
        help="For --gate-drop: a rise of METRIC is the regression.",
    ),
]
_CI_FILES = [
    click.option(
        "--summary",
        type=click.Choice(["md"]),
        help="Write a markdown summary to --summary-file, else $GITHUB_STEP_SUMMARY, else stdout.",
    ),
    click.option(
        "--summary-file",
        metavar="FILE",
        help="Write the markdown summary to FILE (implies --summary md).",
    ),
    click.option("--junit", metavar="FILE", help="Write the checks as JUnit XML to FILE."),
]


def drop_gates(
    texts: tuple[str, ...], baseline: str | None, lower: tuple[str, ...] = ()
) -> list[Any]:
    if not texts and baseline is None and not lower:
        return []  # the comparison's modules stay unimported: a run without them starts sooner
    from flowkit.inspect.regression import parse_drop

    drops = [parse_drop(t) for t in texts]
    if drops and baseline is None:
        raise UsageError(
            "--gate-drop compares with a baseline: give --baseline RUN",
            hint="e.g. --baseline main --gate-drop 'groundedness.mean>0.1'",
        )
    if lower and baseline is None:  # else silently nothing: it turns only a baseline's verdicts
        raise UsageError(
            "--lower-is-better turns the verdicts against a baseline: give --baseline RUN",
            hint="e.g. --baseline main --gate-drop latency --lower-is-better latency",
        )
    return drops


def baseline_apart(
    baseline: Path, output: str | None, name: str | None, resume: str | None
) -> None:
    """A run may not replace its own baseline: the gates would compare the new rows with
    themselves (the baseline's metrics are read first, its rows only after the run)."""
    from flowkit.runs.folder import resolve_run_dir

    written = [Path(output)] if output else [Path("runs") / name] if name else []
    if resume is not None:
        written.append(resolve_run_dir(resume))
    if any(p.resolve() == baseline.resolve() for p in written):
        raise UsageError(
            f"--baseline {str(baseline)!r} is the run folder this run writes",
            hint="give this run another --name or --output, and keep the baseline apart",
        )


def scale_out_options(command: F) -> F:
    """`run`'s options for running rows elsewhere than this process (docs/scale-out.md)."""
    return _apply(_SCALE_OUT, command)


_SCALE_OUT = [
    click.option(
        "--backend",
        default="local",
        show_default=True,
        type=click.Choice(["local", "loky", "threading", "multiprocessing", "dask", "ray"]),
        help="Where rows run: this process, or worker processes, threads or a Dask or Ray cluster "
        "(see docs/scale-out.md).",
    ),
    click.option(
        "--workers",
        default=2,
        show_default=True,
        type=_Number(int, 1),
        help="Worker processes or threads (loky, multiprocessing, threading); a Dask or Ray "
        "cluster runs a chunk on each of its threads or CPUs.",
    ),
    click.option(
        "--scheduler",
        help="The cluster to join: a Dask scheduler (tcp://HOST:8786) with --backend dask, a Ray "
        "address (HOST:6379, ray://HOST:10001) with --backend ray.",
    ),
    click.option(
        "--chunk-size",
        type=_Number(int, 1),
        help="Rows per chunk sent to a worker (what a lost worker costs; default: 32 for a flow "
        "that calls a model, 512 for a python-only one).",
    ),
]
