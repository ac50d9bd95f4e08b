"""flowkit: evaluate LLM applications with flows defined in YAML."""

from __future__ import annotations

__version__ = "0.1.0"

from flowkit.errors import DataError, FlowkitError, UsageError, ValidationError
from flowkit.flow.loader import load_flow


def run(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a flow over a dataset; see :func:`flowkit.api.run`."""
    from flowkit.api import run as _run

    return _run(*args, **kwargs)


def resume(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Finish an interrupted or partly failed run; see :func:`flowkit.api.resume`."""
    from flowkit.api import resume as _resume

    return _resume(*args, **kwargs)


__all__ = [
    "DataError",
    "FlowkitError",
    "UsageError",
    "ValidationError",
    "__version__",
    "load_flow",
    "resume",
    "run",
]
