"""The stall deadline: an attempt that outlives the latencies seen so far is cut and retried.

Once ``SAMPLES`` replies were seen, the deadline is ``FACTOR`` × their 99th percentile, at least
a floor, at most the configured timeout. It applies to attempts already in flight too: the first
requests of a run start before anything is known, and one of them stalling must not hold its
slot (and the end of the run) for the whole timeout. Retrying was chosen over hedging: it frees
the slot instead of doubling it, and a stall is rare enough that the lost head start is cheap.

Deadlines are moved with ``asyncio.Timeout.reschedule`` (Python 3.11+); on 3.10 an attempt
keeps the deadline it started with.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

FACTOR = 3.0
"""The stall deadline is this many times the 99th percentile of recent reply latencies."""
SAMPLES = 20
"""Replies seen before the learned deadline replaces the configured timeout."""


class Stalled(TimeoutError):
    """An attempt cut at the learned stall deadline, before the configured timeout."""


class _Attempt:
    __slots__ = ("limit", "scope", "started")

    def __init__(self, started: float, limit: float) -> None:
        self.started = started
        self.limit = limit  # seconds from ``started`` it may take
        self.scope: Any = None  # its asyncio.Timeout, once inside it


class StallWatch:
    """Learns the stall deadline from reply latencies and holds attempts to it."""

    def __init__(self, timeout: float, floor: float = 1.0) -> None:
        self.timeout = timeout
        self.floor = floor
        self.deadline: float | None = None
        self._latencies: deque[float] = deque(maxlen=256)
        self._seen = 0
        self._open: set[_Attempt] = set()

    async def run(self, ceiling: float, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()`` within ``ceiling`` seconds, or the learned deadline when shorter
        (then :class:`Stalled` is raised); a success's latency teaches the deadline."""
        loop = asyncio.get_running_loop()
        limit = min(ceiling, self.deadline) if self.deadline else ceiling
        attempt = _Attempt(loop.time(), limit)
        try:
            if not hasattr(asyncio, "timeout"):  # Python 3.10
                value = await asyncio.wait_for(call(), limit)
            else:
                # ``asyncio.timeout`` runs the call inline, so it starts in the same loop step
                # as the admission check before it (``wait_for`` starts a task a step later).
                async with asyncio.timeout(limit) as scope:
                    attempt.scope = scope
                    self._open.add(attempt)
                    try:
                        value = await call()
                    finally:
                        self._open.discard(attempt)
        except (asyncio.TimeoutError, TimeoutError):  # one class from Python 3.11 on
            ours = attempt.scope is None or attempt.scope.expired()
            if ours and attempt.limit < ceiling:
                cut = f"no reply within the stall deadline ({attempt.limit:.3g}s)"
                raise Stalled(cut) from None
            raise
        self._observe(loop.time() - attempt.started)
        return value

    def _observe(self, latency: float) -> None:
        self._latencies.append(latency)
        self._seen += 1
        if len(self._latencies) < SAMPLES or self._seen % SAMPLES:
            return
        ordered = sorted(self._latencies)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        self.deadline = min(self.timeout, max(self.floor, FACTOR * p99))
        for attempt in self._open:
            # A timeout that has fired, its attempt not yet run, cannot be moved (asyncio
            # raises), and needs not be: that attempt is ending.
            if attempt.limit > self.deadline and not attempt.scope.expired():
                attempt.limit = self.deadline
                attempt.scope.reschedule(attempt.started + self.deadline)
