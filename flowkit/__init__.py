"""flowkit: evaluate LLM applications with flows defined in YAML.

The public API is here: ``run`` (``arun`` to await it), ``resume``, ``load_flow`` and the error
classes. One package per concept; imports point down this list, never up:

    cli → api → inspect → runs → data → engine → kinds → metrics, llm → flow → code → cache → errors

``flow`` is what a flow is, ``kinds`` its node kinds, ``engine`` runs rows, ``code`` imports
users' functions and fingerprints the code behind them, ``cache`` keeps node results, ``data``
reads rows in, ``runs`` owns a run's life and folder, ``llm`` talks to models, ``metrics`` is what
the built-in flows call, ``inspect`` reads runs back, ``cli`` is the command. ``testing`` is the
offline OpenAI-compatible server the tests and demos use.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import Any

from flowkit.errors import DataError, FlowkitError, UsageError, ValidationError


def __getattr__(name: str) -> Any:
    # Loaded on first use: `import flowkit` (and `flowkit --help`) stays cheap without the
    # loader's pydantic models.
    if name == "load_flow":
        from flowkit.flow.loader import load_flow

        return load_flow
    raise AttributeError(f"module 'flowkit' has no attribute {name!r}")


def run(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a flow over a dataset; see :func:`flowkit.api.run`."""
    from flowkit.api import run as _run

    return _run(*args, **kwargs)


async def arun(*args, **kwargs):  # type: ignore[no-untyped-def]
    """``await flowkit.arun(flow, data, ...)`` inside an event loop; see :func:`run`."""
    from flowkit.api import arun as _arun

    return await _arun(*args, **kwargs)


def log_metric(name: str, value: object) -> None:
    """Record a metric from an aggregate function (`metrics: logged`); see flowkit.kinds."""
    from flowkit.kinds.metric_log import log_metric as _log

    _log(name, value)


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
    "arun",
    "load_flow",
    "log_metric",
    "resume",
    "run",
]
