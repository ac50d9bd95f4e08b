"""The environment variables a run sets (``RunConfig.environment``, the CLI's
``--environment-variables``), set for the run and restored after it.

A process has one environment. Runs in one process that set the same variables (or none) may
overlap: the variables are set when the first starts and restored when the last ends. A run
whose variables differ from those of a run in progress in the process is refused: either one's
code would read the other's values (and cache what it computed under its own key). Run such
runs one after another, or in separate processes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

from flowkit.errors import UsageError


class _Applied:
    """What runs in progress in this process have set (guarded by ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.env: dict[str, str] = {}
        self.runs = 0
        self.saved: dict[str, str | None] = {}


_applied = _Applied()


@contextlib.contextmanager
def run_environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` while the block runs; the values before it restored after."""
    state, env = _applied, dict(env)
    with state.lock:
        if state.runs and state.env != env:
            raise UsageError(
                f"environment variables {_names(env)}: a run with {_names(state.env)} is in "
                "progress in this process, and a process has one environment",
                hint="run them one after another, or in separate processes",
            )
        if not state.runs:
            state.saved = {name: os.environ.get(name) for name in env}
            os.environ.update(env)
            state.env = env
        state.runs += 1
    try:
        yield
    finally:
        with state.lock:
            state.runs -= 1
            if not state.runs:
                for name, value in state.saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                state.env, state.saved = {}, {}


def _names(env: Mapping[str, str]) -> str:
    """The variables' names only: their values may be keys."""
    return ", ".join(sorted(env)) if env else "none"
