"""The few exception classes flowkit raises, each carrying the exit code the CLI uses.

User errors print as ``error: …`` without a traceback; anything else is a bug.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


class FlowkitError(Exception):
    """Root of every error that is the user's to fix; ``exit_code`` is what the CLI returns."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class UsageError(FlowkitError):
    """A bad command line, option or configuration value."""

    exit_code = 2


class DataError(FlowkitError):
    """A data file that cannot be read, or rows that do not fit the flow."""

    exit_code = 2


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem found while validating a flow, sortable by place."""

    file: str
    line: int
    node: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        who = f" node '{self.node}':" if self.node else ""
        return f"{where}:{who} {self.message}"


class ValidationError(FlowkitError):
    """Everything wrong with a flow, collected before any row runs."""

    exit_code = 2

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = sorted(set(diagnostics))
        n = len(self.diagnostics)
        head = f"{n} problem{'s' if n != 1 else ''} in flow"
        super().__init__(head + "\n" + "\n".join(f"  {d}" for d in self.diagnostics))


class GateError(FlowkitError):
    """A CI gate on a metric did not hold; the run itself is kept."""

    exit_code = 1


# -- how messages name things ---------------------------------------------------------------
def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A hint suffix like " (did you mean 'judge'?)", or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


MOST_LISTED = 20
"""How many names of a user's data (columns, the keys of a reply) a message lists."""


def one_of(choices: Iterable[str], most: int | None = None) -> str:
    """The names, sorted, comma-separated ("none" for none). With ``most``, only that many and
    how many more: a data file with 200,000 columns made a 1.7 MB error message."""
    names = sorted(str(c) for c in choices)
    if most is not None and len(names) > most:
        return ", ".join(names[:most]) + f", … and {len(names) - most} more"
    return ", ".join(names) if names else "none"


def display(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


class EndpointError(FlowkitError):
    """A model endpoint that fails every call for a reason no retry can fix (bad key, no such
    model, refused, unknown host): the run stops, keeping the rows that finished."""

    exit_code = 1
