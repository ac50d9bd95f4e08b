"""Metrics an aggregate function logs by calling a function, rather than returns as a dict.

An aggregate node with `metrics: logged` collects every `log_metric(name, value)` made while its
function runs; the collection is per call (a context variable), so nothing leaks between nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_logged: ContextVar[dict[str, Any] | None] = ContextVar("flowkit_logged_metrics", default=None)


def log_metric(name: str, value: Any) -> None:
    """Record metric ``name`` of the aggregate now running (the last value logged wins).

    Outside an aggregate node it does nothing, so the same code can run in a plain script.
    """
    logged = _logged.get()
    if logged is not None:
        logged[str(name)] = value


@contextmanager
def collecting() -> Iterator[dict[str, Any]]:
    """The metrics logged within the block."""
    logged: dict[str, Any] = {}
    token = _logged.set(logged)
    try:
        yield logged
    finally:
        _logged.reset(token)
