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
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from flowkit.errors import FlowkitError

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

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


def outside_any_loop(fn: Callable[P, R]) -> Callable[P, R]:
    """Called from code already inside an event loop (Jupyter, an async app), run ``fn`` in a
    worker thread with a loop of its own: the run drives its rows with ``asyncio.run``. A
    KeyboardInterrupt while waiting (a kernel interrupt) stops the run as Ctrl-C does
    (:class:`Stop`): the finished rows are kept and it ends ``interrupted``."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return fn(*args, **kwargs)
        stop = Stop()
        pool = ThreadPoolExecutor(1, thread_name_prefix="flowkit-run")
        try:
            future = pool.submit(functools.partial(call_stoppable, stop, fn), *args, **kwargs)
            while True:
                try:
                    return future.result()
                except KeyboardInterrupt:
                    # The run ends as interrupted, and says so (Interrupted) once it has.
                    stop.request()
        finally:
            pool.shutdown(wait=False)

    wrapper.__signature__ = _signature(fn)  # type: ignore[attr-defined]
    return wrapper


def awaitable(fn: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``fn`` in a worker thread, awaited: the caller's loop keeps turning meanwhile. The
    signature (for ``help()`` and IDEs) is ``fn``'s. Cancelling the awaiting task stops the
    run (:class:`Stop`) and waits for it to close its folder as ``interrupted``: no work
    is left going on in the background."""

    @functools.wraps(fn)
    async def waited(*args: P.args, **kwargs: P.kwargs) -> R:
        stop = Stop()
        pool = ThreadPoolExecutor(1, thread_name_prefix="flowkit-run")
        try:
            # The caller's context goes along (as asyncio.to_thread takes it).
            context = contextvars.copy_context()
            call = functools.partial(call_stoppable, stop, fn, *args, **kwargs)
            work: Future[R] = pool.submit(context.run, call)
            future = asyncio.wrap_future(work)
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                stop.request()
                with contextlib.suppress(FlowkitError):
                    await future  # the worker closes the run folder; then the cancel goes on
                raise
        finally:
            pool.shutdown(wait=False)

    waited.__signature__ = _signature(fn)  # type: ignore[attr-defined]
    return waited


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature with its annotations as types, not strings, so ``help()`` reads
    ``concurrency: int = 16`` rather than ``concurrency: 'int' = 16``."""
    return inspect.signature(fn, eval_str=True)
