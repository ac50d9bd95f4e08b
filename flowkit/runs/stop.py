"""Stopping a run that goes on in a worker thread, as Ctrl-C stops one in the CLI.

Called from inside a running event loop (Jupyter, an async app), ``flowkit.run`` runs in a
worker thread with a loop of its own (``flowkit.api``), and ``flowkit.arun`` always does. A
kernel interrupt raises ``KeyboardInterrupt`` in the thread that waits, not in the worker, and
cancelling ``arun``'s task cancels only the wait: without a way in, the run went on to the end
(and its result was lost). A :class:`Stop` is that way in: the waiting side calls
:meth:`Stop.request`, which cancels the worker's row loop; the job (``job``) then reads it as
Ctrl-C: finished rows are kept, the run is marked ``interrupted``, and ``resume`` continues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

current: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("flowkit_stop", default=None)
"""The stop of the run this thread is doing for another one (None: a run in its own thread)."""


class Stop:
    """A request to stop one run, made from another thread than the one running it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._target: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
        self.requested = False

    def request(self) -> None:
        """Stop the run: its row loop is cancelled now, or as soon as it starts."""
        with self._lock:
            self.requested = True
            target = self._target
        if target is not None:
            loop, task = target
            # A loop that has closed has finished its rows anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)

    async def guard(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` as the stoppable part of the run; a stop raises KeyboardInterrupt."""
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            self._target = (asyncio.get_running_loop(), task)
            requested = self.requested
        if requested:
            work.close()
            raise KeyboardInterrupt
        try:
            return await work
        except asyncio.CancelledError:
            if self.requested:
                raise KeyboardInterrupt from None
            raise
        finally:
            with self._lock:
                self._target = None


def run_rows(drive: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(drive())``, stoppable by the thread that waits for this run."""
    stop = current.get()
    if stop is None:
        return asyncio.run(drive())
    return asyncio.run(stop.guard(drive()))


def call_stoppable(stop: Stop, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (in a worker thread) as a run ``stop`` can stop."""
    token = current.set(stop)
    try:
        return fn(*args, **kwargs)
    finally:
        current.reset(token)
