"""flowkit: evaluate LLM applications with flows defined in YAML.

The public API is here: ``run``, ``resume``, ``load_flow`` and the error classes. One package
per concept; imports point down this list, never up:

    cli → api → inspect → runs → data → engine → kinds → metrics, llm → flow → cache → errors

``flow`` is what a flow is, ``kinds`` its node kinds, ``engine`` runs rows, ``cache`` keeps node
results, ``data`` reads rows in, ``runs`` owns a run's life and folder, ``llm`` talks to models,
``metrics`` is what the built-in flows call, ``inspect`` reads runs back, ``cli`` is the
command. ``testing`` is the offline OpenAI-compatible server the tests and demos use.
"""

from __future__ import annotations

__version__ = "0.1.0"

from flowkit.errors import DataError, FlowkitError, UsageError, ValidationError


# Imported on first use: `flowkit show` and the other read-only commands then start without
# the flow loader (networkx, pydantic), which is most of their start-up time.
def load_flow(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Load and validate a flow; see :func:`flowkit.flow.loader.load_flow`."""
    from flowkit.flow.loader import load_flow as _load_flow

    return _load_flow(*args, **kwargs)


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
