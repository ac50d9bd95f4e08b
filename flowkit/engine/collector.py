"""Python's cyclic garbage collector, kept quiet while rows run.

A run's rows allocate many short-lived containers (scopes, inputs, replies, trace records), and
CPython's collector counts them: every 700 net allocations it scans the youngest objects, every
tenth of those the middle generation, and now and then the whole heap, which after importing
the openai SDK, pydantic and a flow holds hundreds of thousands of objects that will live as
long as the process. Each full scan stops the event loop while every row in flight waits, and
at high concurrency the scans are a large share of a row's CPU (``benchmarks/llm_bound.py``).

So while rows run:

- what exists before the first row (modules, the flow, clients) is frozen (``gc.freeze``): no
  collection scans it, and it is unfrozen when the rows end, so nothing is kept for good;
- the youngest generation is collected every ``YOUNG`` net allocations instead of 700. Almost
  everything a row allocates is freed by reference counting as the row ends; the collector only
  matters for reference cycles (an exception and its traceback, say), which wait a little
  longer to be freed.

The process's own settings come back when the last run in it ends; runs may overlap (threads,
a notebook), so the first in takes the settings and the last out restores them. They are the
process's: a thread of the caller's that runs meanwhile collects on the same schedule. A reference
cycle that was garbage before the run is frozen with the rest and freed after it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 20_000
"""Net container allocations between collections of the youngest generation while rows run."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, ...] = ()
_froze = False


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Freeze what exists and collect the young generation less often, until the block ends.

    What the process set up itself is left alone: objects it froze stay frozen after the run
    (a server that froze them before forking keeps them so), and a collector it turned off
    (``gc.disable()`` or a threshold of 0) stays off."""
    global _active, _saved, _froze
    with _lock:
        _active += 1
        if _active == 1:
            _saved = gc.get_threshold()
            on = gc.isenabled() and _saved[0] > 0
            _froze = on and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
            if on:
                gc.set_threshold(max(YOUNG, _saved[0]), *_saved[1:])
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                gc.set_threshold(*_saved)
                if _froze:
                    gc.unfreeze()
