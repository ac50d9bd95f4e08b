"""One scheduler per endpoint, shared by every node, row and flow of the process.

It keeps a run from storming an endpoint: requests in flight are bounded by an adaptive
limit, optional RPM/TPM budgets space requests out, and failed attempts are retried with
backoff.  The in-flight limit follows AIMD (as TCP congestion control does): a 429 halves
it, and every ``limit`` successes add one back, up to the configured ``concurrency``.
Only one halving happens per "generation" — attempts that started before the last cut do
not cut again — so a burst of 429s from requests that were already in flight counts as
one congestion signal, not thirty-two.  A run therefore settles near the endpoint's real
limit instead of oscillating between storm and trickle.

The scheduler holds no ``asyncio.Lock``/``Semaphore`` (they bind to one event loop); its
waiters are plain futures, and per-loop state is reset when a new loop starts using it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Generic, TypeVar

from flowkit.llm.budget import Clock, Sleep, TokenBucket
from flowkit.llm.config import Endpoint, Limits
from flowkit.llm.retry import Failure, backoff, classify

T = TypeVar("T")


@dataclass(frozen=True)
class Attempted(Generic[T]):
    """A successful call's value and how many attempts it took (1 = no retry)."""

    value: T
    attempts: int


@dataclass
class SchedulerStats:
    """Counters for a run, readable at any time via :meth:`Scheduler.snapshot`."""

    calls: int = 0
    """Logical calls submitted."""
    requests: int = 0
    """Attempts actually sent."""
    retries: int = 0
    """Attempts after the first."""
    rate_limited: int = 0
    """429 responses."""
    server_errors: int = 0
    """5xx / 408 responses."""
    timeouts: int = 0
    """Attempts abandoned after the per-request timeout."""
    connection_errors: int = 0
    """Attempts that never got a response."""
    malformed: int = 0
    """Successful-looking responses whose body could not be parsed."""
    errors: int = 0
    """Calls that failed for good (non-retryable, or retries exhausted)."""
    tokens: int = 0
    """Tokens used by successful calls (from usage when reported, else the estimate)."""
    peak_in_flight: int = 0
    """Most attempts in flight at once."""


class Scheduler:
    """Admission control, rate budgets and retries for one endpoint.

    ``window``, ``clock``, ``sleep`` and ``rng`` are injectable so tests can compress a
    minute into milliseconds and make jitter deterministic.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        name: str = "",
        window: float = 60.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self.limits = limits
        self.stats = SchedulerStats()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._limit = limits.concurrency
        self._successes = 0
        self._generation = 0
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._not_before = 0.0
        self._rpm = (
            TokenBucket(limits.rpm, window=window, clock=clock, sleep=sleep) if limits.rpm else None
        )
        self._tpm = (
            TokenBucket(limits.tpm, window=window, clock=clock, sleep=sleep) if limits.tpm else None
        )

    # -- introspection -------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """The current adaptive in-flight limit."""
        return self._limit

    @property
    def in_flight(self) -> int:
        """Attempts holding a slot right now."""
        return self._in_flight

    def snapshot(self) -> dict[str, int | str]:
        """Counters plus the current and configured limits, for run records and progress."""
        return {
            "endpoint": self.name,
            **asdict(self.stats),
            "limit": self._limit,
            "max_limit": self.limits.concurrency,
        }

    def reset_stats(self) -> SchedulerStats:
        """Start counting afresh (e.g. per run) and return the old counters.

        The learned in-flight limit is kept: it describes the endpoint, not the run.
        """
        old, self.stats = self.stats, SchedulerStats()
        return old

    # -- the one public operation --------------------------------------------------------

    async def run(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        tokens: int = 0,
        used_tokens: Callable[[T], int | None] | None = None,
        timeout: float | None = None,
    ) -> Attempted[T]:
        """Run ``call`` under the endpoint's limits, retrying what is worth retrying.

        ``tokens`` is the estimate charged to the TPM budget before sending;
        ``used_tokens`` extracts the real count from the result to correct it afterwards.
        ``timeout`` (default: the endpoint's) bounds each attempt, not the waiting.
        Raises the last attempt's error once retries are exhausted, and a non-retryable
        error (400, 401, 404…) at once.
        """
        per_attempt = timeout if timeout is not None else self.limits.timeout
        self.stats.calls += 1
        retry = 0
        while True:
            await self._acquire()
            generation = self._generation
            try:
                await self._admit(tokens)
                if self._in_flight > self._limit:
                    # The limit fell while we waited for budget: hand the slot back rather
                    # than add to a crowd the endpoint has just said is too big.
                    self._refund(tokens)
                    continue
                self.stats.requests += 1
                try:
                    value = await _within(per_attempt, call)
                except Exception as exc:
                    if self._tpm is not None:
                        self._tpm.adjust(-tokens)  # providers do not bill failed calls
                    verdict = classify(exc)
                    self._count_failure(verdict.kind, generation)
                    if not verdict.retryable or retry >= self.limits.max_retries:
                        self.stats.errors += 1
                        raise
                    if verdict.retry_after is not None:
                        delay = verdict.retry_after
                        if verdict.kind is Failure.RATE_LIMIT:
                            # The quota is shared, so everyone on this endpoint should wait.
                            self._not_before = max(self._not_before, self._clock() + delay)
                    else:
                        delay = backoff(
                            retry,
                            base=self.limits.backoff_base,
                            cap=self.limits.backoff_max,
                            rng=self._rng,
                        )
                else:
                    self._count_success(value, tokens, used_tokens)
                    return Attempted(value, retry + 1)
            finally:
                self._release()
            retry += 1
            self.stats.retries += 1
            if delay > 0:
                await self._sleep(delay)

    # -- admission -----------------------------------------------------------------------

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        """Forget in-flight bookkeeping left behind by a previous (finished) event loop."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._in_flight = 0
            self._waiters.clear()
        return loop

    async def _acquire(self) -> None:
        loop = self._bind_loop()
        if self._in_flight < self._limit and not self._waiters:
            self._take_slot()
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot was handed over just as we were cancelled
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _take_slot(self) -> None:
        self._in_flight += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self._in_flight)

    def _release(self) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to waiters in arrival order (the slot is taken on their behalf)."""
        while self._waiters and self._in_flight < self._limit:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._take_slot()
            waiter.set_result(None)

    async def _admit(self, tokens: int) -> None:
        """Wait out a server-requested pause, then the RPM and TPM budgets."""
        while (pause := self._not_before - self._clock()) > 0:
            await self._sleep(pause)
        if self._rpm is not None:
            await self._rpm.acquire(1)
        if self._tpm is not None and tokens > 0:
            await self._tpm.acquire(tokens)

    def _refund(self, tokens: int) -> None:
        if self._rpm is not None:
            self._rpm.adjust(-1)
        if self._tpm is not None and tokens > 0:
            self._tpm.adjust(-tokens)

    # -- feedback ------------------------------------------------------------------------

    def _count_success(
        self, value: T, tokens: int, used_tokens: Callable[[T], int | None] | None
    ) -> None:
        used = used_tokens(value) if used_tokens is not None else None
        if used is not None and self._tpm is not None:
            self._tpm.adjust(used - tokens)
        self.stats.tokens += used if used is not None else tokens
        self._successes += 1
        if self._successes >= self._limit and self._limit < self.limits.concurrency:
            self._limit += 1
            self._successes = 0
            self._wake()

    def _count_failure(self, kind: Failure, generation: int) -> None:
        if kind is Failure.RATE_LIMIT:
            self.stats.rate_limited += 1
            if generation == self._generation:
                self._limit = max(1, self._limit // 2)
                self._generation += 1
                self._successes = 0
        elif kind is Failure.SERVER:
            self.stats.server_errors += 1
        elif kind is Failure.TIMEOUT:
            self.stats.timeouts += 1
        elif kind is Failure.CONNECTION:
            self.stats.connection_errors += 1
        elif kind is Failure.MALFORMED:
            self.stats.malformed += 1


async def _within(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """Await ``call()`` with a deadline, in the current task.

    ``asyncio.timeout`` runs the call inline, so it starts in the same loop step as the
    admission check before it; ``wait_for`` (the fallback before 3.11) wraps it in a task
    that starts a step later.
    """
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await call()
    return await asyncio.wait_for(call(), seconds)


_lock = threading.Lock()
_schedulers: dict[tuple[tuple[str, ...], int], Scheduler] = {}


def scheduler_for(endpoint: Endpoint) -> Scheduler:
    """The scheduler of ``endpoint`` for this thread (created on first use).

    Normally that is one per endpoint for the whole process.  The threading backend runs
    an event loop per worker thread, and each worker is given its share of the budgets
    (``flowkit.runs.backends``), so each thread gets its own scheduler, as each process would.
    """
    key = (endpoint.identity(), threading.get_ident())
    with _lock:
        found = _schedulers.get(key)
        if found is None:
            found = _schedulers[key] = Scheduler(endpoint.limits, name=endpoint.connection)
    return found


def all_schedulers() -> list[Scheduler]:
    """Every scheduler created so far, for run summaries."""
    with _lock:
        return list(_schedulers.values())


def reset_schedulers() -> None:
    """Forget every scheduler and its learned limit (between independent runs, in tests)."""
    with _lock:
        _schedulers.clear()
