"""A small stand-in for the `promptflow` package, importable while flowkit runs a Prompt Flow flow.

It sits last on the import path, so an installed Prompt Flow always wins. It provides what flow
code imports: `tool`, `log_metric` (also from `promptflow.core`), `promptflow.connections` and
the chat helpers of `promptflow.tools`.
"""

from __future__ import annotations

# The shim runs as the top-level `promptflow`, a name mypy does not resolve.
from promptflow.core import log_flow_metric, log_metric, tool  # type: ignore[import-not-found]

__all__ = ["log_flow_metric", "log_metric", "tool"]
