"""flowkit: evaluate LLM applications with flows defined in YAML.

The public API is here: ``run`` (``arun`` to await it), ``resume``, ``compare`` (two runs, as
tables), ``load_flow``, ``RunConfig`` (every run option) and the error classes. One package per
concept; imports point down this list, never up:

    cli → api → review → inspect → labels → runs → data → batch → engine → kinds → metrics, llm
    → flow → code → cache → errors

``flow`` is what a flow is, ``kinds`` its node kinds, ``engine`` runs rows, ``code`` imports
users' functions and fingerprints the code behind them, ``cache`` keeps node results, ``batch``
sends a run's llm calls through the providers' batch APIs (``--batch``), ``data`` reads rows
in, ``runs`` owns a run's life and folder, ``llm`` talks to models, ``metrics`` is what
the built-in flows call, ``labels`` reads people's labels and weighs the judges against them
(agreement, corrected estimates, bias probes), ``inspect`` reads runs back, ``review`` is the
labelling web page, ``cli`` is the command. ``testing`` is the offline OpenAI-compatible server
the tests and demos use.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from flowkit.errors import DataError, FlowkitError, UsageError, ValidationError

if TYPE_CHECKING:  # what an IDE and mypy see; at run time __getattr__ below imports them
    from flowkit.api import arun, resume, run
    from flowkit.flow.loader import load_flow
    from flowkit.inspect.comparison import compare
    from flowkit.runs.config import RunConfig

# Loaded on first use: `import flowkit` (and `flowkit --help`) stays cheap without pydantic,
# the engine and the model layer. The functions are the real ones, so `help(flowkit.run)` and
# `inspect.signature` show their parameters.
_LAZY = {
    "run": "flowkit.api",
    "arun": "flowkit.api",
    "resume": "flowkit.api",
    "compare": "flowkit.inspect.comparison",
    "load_flow": "flowkit.flow.loader",
    "RunConfig": "flowkit.runs.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flowkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def log_metric(name: str, value: object) -> None:
    """Record a metric from an aggregate function (`metrics: logged`); see flowkit.kinds."""
    from flowkit.kinds.metric_log import log_metric as _log

    _log(name, value)


__all__ = [
    "DataError",
    "FlowkitError",
    "RunConfig",
    "UsageError",
    "ValidationError",
    "__version__",
    "arun",
    "compare",
    "load_flow",
    "log_metric",
    "resume",
    "run",
]
