"""Python's cyclic garbage collector, kept quiet while rows run.

A run's rows allocate many short-lived containers (scopes, inputs, replies, trace records), and
CPython's collector counts them: every 700 net allocations it scans the youngest objects, every
tenth of those the middle generation, and now and then the whole heap, which after importing
the openai SDK, pydantic and a flow holds hundreds of thousands of objects that will live as
long as the process. Each full scan stops the event loop while every row in flight waits, and
at high concurrency the scans are a large share of a row's CPU (``benchmarks/llm_bound.py``).

So while rows run, what exists before the first row (modules, the flow, clients) is frozen
(``gc.freeze``): no collection scans it, and it is unfrozen when the rows end, so nothing is
kept for good. The full scans were the cost; the young collections scan only what the rows
made, and are cheap.

The collection thresholds are left as the process has them. Collecting the youngest generation
less often (every 20,000 net allocations instead of 700) kept reference cycles for longer than
they cost: the collector counts containers, not bytes, so rows that each leave a few containers
holding a big buffer in a cycle (an exception holding a frame holding a reply) piled up
garbage: 4,000 rows of 512 KiB of cycles peaked at 2,052 MB against 370 MB with Python's
defaults (``benchmarks/gc_garbage.py``; now about Python's, and as fast as before).

The process's own state comes back when the last run in it ends; runs may overlap (threads,
a notebook), so the first in freezes and the last out unfreezes. A reference cycle that was
garbage before the run is frozen with the rest and freed after it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 2000
"""Net container allocations between collections of the youngest generation while rows run."""

_lock = threading.Lock()
_active = 0
_froze = False


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Freeze what exists until the block ends.

    What the process set up itself is left alone: objects it froze stay frozen after the run
    (a server that froze them before forking keeps them so), and a collector it turned off
    (``gc.disable()`` or a threshold of 0) stays off."""
    global _active, _froze
    with _lock:
        _active += 1
        if _active == 1:
            on = gc.isenabled() and gc.get_threshold()[0] > 0
            _froze = on and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _froze:
                gc.unfreeze()
