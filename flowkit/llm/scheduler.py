"""One scheduler per endpoint, shared by every node, row and flow of the process.

It drives an endpoint at its real limit without storming it. Requests in flight are bounded by
the connection's ``concurrency``; on top of that the *rate* of requests and of tokens is paced
by token buckets, because at 20 ms a reply even one request in flight can be many times a
per-minute cap. The pace comes from three sources, the lowest winning:

- the connection's configured ``rpm`` / ``tpm``;
- the ``x-ratelimit-*`` headers of replies (limit → pace, remaining → level; see ``ratelimits``);
- 429s that prove overload, when there are no headers: the request rate is cut to a fraction of
  the success rate just measured and probed back up linearly (AIMD on the rate, one cut per
  generation), so it settles just under the cap.

A 429 asking for a positive Retry-After pauses the **whole endpoint**; when the pause ends the
buckets restart empty, so the requests that queued during it leave at the pace, not in a burst.
A 429 with ``Retry-After: 0`` or a 5xx alone is a scattered fault, retried without cutting the
pace; only 429s that cluster (most of the recent replies) count as overload then.

Stalled replies: an attempt that outlives a deadline learned from the latencies seen is cut and
retried at once, in flight or not (see ``stalls``).

When every call fails for a reason no retry can fix (bad key, no such model, connection refused,
unknown host) ``STOP_AFTER`` times in a row, the endpoint is marked down and every call on it
raises :class:`flowkit.errors.EndpointError`, which stops the run (finished rows are kept).

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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Generic, TypeVar

from flowkit.errors import EndpointError
from flowkit.llm.budget import Clock, Sleep, TokenBucket
from flowkit.llm.config import Endpoint, Limits
from flowkit.llm.ratelimits import RateHeaders, parse_rate_headers
from flowkit.llm.retry import Failure, Verdict, backoff, classify
from flowkit.llm.stalls import Stalled, StallWatch

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
    overloads: int = 0
    """429s taken as proof of overload (they may cut the pace); the rest were scattered."""
    stalled: int = 0
    """Attempts cancelled at the learned stall deadline and retried."""
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


STOP_AFTER = 5
"""Unfixable failures in a row, with no success between, that mark an endpoint down."""
HEADER_MARGIN = 0.97
"""Fraction of a known limit (configured or from headers) to pace at: the client's and the
server's clocks and windows never align exactly, and replies arrive bunched."""
CUT = 0.9
"""On overload the learned rate becomes this fraction of the success rate just measured."""
PROBE = 0.002
"""After a cut the learned rate grows by this fraction of itself per 1/60 of the window (a
second for per-minute limits): a slow probe, so the pace settles just under the cap."""
CLIMB = 0.01
"""After the first cut (from a success rate measured while unpaced, which pauses make too
low) the learned rate compounds by this much per 1/60 of the window until a paced cut."""
TOKEN_LEARNING = 0.2
"""Weight of each reply's used/estimated tokens in the running correction of the estimates."""
CLUSTER = (12, 20)
"""A 429 without a pause request is overload when at least 12 of the last 20 replies were 429:
scattered 429s at a 15% rate reach that about once in a million windows, an endpoint over its
limit does all the time."""


class Scheduler:
    """Admission control, rate pacing and retries for one endpoint.

    ``window`` (the span rpm/tpm and header limits count over), ``clock``, ``sleep``, ``rng``
    and ``stall_floor`` are injectable so tests can compress a minute into seconds.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        name: str = "",
        url: str = "",
        window: float = 60.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
        stall_floor: float = 1.0,
    ) -> None:
        self.name = name
        self.url = url
        self.limits = limits
        self.stats = SchedulerStats()
        self.window = window
        self._stalls = StallWatch(limits.timeout, stall_floor)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._generation = 0
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._not_before = 0.0
        # Requests per window from each source; the pace is the lowest known.
        self._header_rpm: float | None = None
        self._header_tpm: float | None = None
        self._learned: float | None = None  # requests per window, from overload 429s
        self._learned_at = -float("inf")
        self._measured_cut = False
        self._overloads: list[float] = []  # times of recent overload 429s while paced
        self._rpm: TokenBucket | None = None
        self._tpm: TokenBucket | None = None
        self._token_scale = 1.0  # used tokens / estimated, learned from replies' usage
        self._token_samples = 0
        self._repace()
        self._recent: deque[bool] = deque(maxlen=CLUSTER[1])  # was each reply a 429?
        self._ok_times: deque[float] = deque()
        self._unfixable = 0
        self._answered = False
        self.down: Exception | None = None

    # -- introspection -------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """Most requests in flight at once: the connection's ``concurrency``, but one until the
        endpoint first answers, so a run does not open with a burst the limit headers of
        that first reply would have forbidden."""
        return self.limits.concurrency if self._answered else 1

    @property
    def in_flight(self) -> int:
        """Attempts holding a slot right now."""
        return self._in_flight

    def rate(self) -> float | None:
        """The request pace in requests per window, or None while unpaced."""
        told = self.limits.rpm * HEADER_MARGIN if self.limits.rpm else None
        known = [r for r in (told, self._header_rpm, self._probed()) if r]
        return min(known) if known else None

    def token_rate(self) -> float | None:
        """The token pace in tokens per window, or None while unpaced."""
        told = self.limits.tpm * HEADER_MARGIN if self.limits.tpm else None
        known = [r for r in (told, self._header_tpm) if r]
        return min(known) if known else None

    @property
    def stall_deadline(self) -> float | None:
        """The learned per-attempt deadline, once enough replies were seen."""
        return self._stalls.deadline

    @property
    def stall_floor(self) -> float:
        """The shortest stall deadline (seconds): replies may be that slow without suspicion."""
        return self._stalls.floor

    @stall_floor.setter
    def stall_floor(self, seconds: float) -> None:
        self._stalls.floor = seconds

    def snapshot(self) -> dict[str, int | str | float | None]:
        """Counters plus the limits in force, for run records and progress."""
        return {
            "endpoint": self.name,
            **asdict(self.stats),
            "limit": self.limit,
            "rpm": self.rate(),
            "tpm": self.token_rate(),
            "stall_deadline": self._stalls.deadline,
        }

    def reset_stats(self) -> SchedulerStats:
        """Start counting afresh (e.g. per run) and return the old counters.

        The learned pace is kept: it describes the endpoint, not the run.
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
        headers: Callable[[T], Mapping[str, str] | None] | None = None,
        timeout: float | None = None,
    ) -> Attempted[T]:
        """Run ``call`` under the endpoint's limits, retrying what is worth retrying.

        ``tokens`` is the estimate charged to the token pace before sending; ``used_tokens``
        extracts the real count from the result to correct it afterwards, and ``headers`` the
        reply's headers (for the rate-limit ones). ``timeout`` (default: the endpoint's)
        bounds each attempt, not the waiting. Raises the last attempt's error once retries are
        exhausted, a non-retryable error (400, 401, 404…) at once, and ``EndpointError`` once
        the endpoint is down.
        """
        ceiling = timeout if timeout is not None else self.limits.timeout
        self.stats.calls += 1
        retry = 0
        while True:
            self._check_down()
            await self._acquire()
            generation = self._generation
            delay = 0.0
            # The estimate, scaled by how far off past estimates were: a waiter's wait is fixed
            # when it queues, so a refund after the reply cannot give back an overcharge.
            charge = max(1, round(tokens * self._token_scale)) if tokens > 0 else 0
            try:
                await self._admit(charge)
                self._check_down()
                self.stats.requests += 1
                try:
                    value = await self._stalls.run(ceiling, call)
                except Exception as exc:
                    if self._tpm is not None:
                        self._tpm.adjust(-charge)  # providers do not bill failed calls
                    stalled = isinstance(exc, Stalled)
                    verdict = classify(exc)
                    self._on_failure(verdict, generation, stalled)
                    if not verdict.retryable or retry >= self.limits.max_retries:
                        self.stats.errors += 1
                        raise
                    if stalled:
                        delay = 0.0  # a stall is not congestion: go again at once
                    elif verdict.retry_after is not None:
                        delay = verdict.retry_after
                    else:
                        delay = backoff(
                            retry,
                            base=self.limits.backoff_base,
                            cap=self.limits.backoff_max,
                            rng=self._rng,
                        )
                else:
                    self._on_success(value, tokens, charge, used_tokens, headers)
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
            # A new run (a new loop) tries a down endpoint again: it may have been fixed.
            self.down, self._unfixable = None, 0
        return loop

    def _check_down(self) -> None:
        if self._loop is asyncio.get_running_loop() and self.down is not None:
            raise self.down

    async def _acquire(self) -> None:
        loop = self._bind_loop()
        if self._in_flight < self.limit and not self._waiters:
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
        while self._waiters and self._in_flight < self.limit:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._take_slot()
            waiter.set_result(None)

    async def _admit(self, tokens: int) -> None:
        """Wait out a server-requested pause, then the request and token paces."""
        while (pause := self._not_before - self._clock()) > 0:
            await self._sleep(pause)
        if self._learned is not None:
            self._repace()  # the probe moves the learned rate with time
        if self._rpm is not None:
            await self._rpm.acquire(1)
        if self._tpm is not None and tokens > 0:
            try:
                await self._tpm.acquire(tokens)
            except asyncio.CancelledError:
                if self._rpm is not None:
                    self._rpm.adjust(-1)
                raise

    # -- pacing --------------------------------------------------------------------------

    def _probed(self) -> float | None:
        if self._learned is None:
            return None
        steps = max(0.0, self._clock() - self._learned_at) / (self.window / 60.0)
        if self._measured_cut:
            # Cut from a success rate measured while unpaced, which pauses make too low:
            # climb back fast (5% a step, compounding) until a paced overload says where.
            return self._learned * (1.0 + CLIMB) ** min(steps, 200.0)
        return self._learned * (1.0 + PROBE * steps)

    def _repace(self) -> None:
        """Make the buckets follow the current paces (creating them when a pace appears)."""
        for attr, rate in (("_rpm", self.rate()), ("_tpm", self.token_rate())):
            bucket: TokenBucket | None = getattr(self, attr)
            if rate is None:
                continue
            if bucket is None:
                new = TokenBucket(rate, window=self.window, clock=self._clock, sleep=self._sleep)
                setattr(self, attr, new)
            elif abs(bucket.rate * self.window - rate) > 1e-9 * rate:
                bucket.set_rate(rate, self.window)

    def _learn_headers(self, found: RateHeaders | None) -> None:
        if found is None:
            return
        changed = False
        for quota, attr in ((found.requests, "_header_rpm"), (found.tokens, "_header_tpm")):
            if quota.limit:
                paced = quota.limit * HEADER_MARGIN
                if getattr(self, attr) != paced:
                    setattr(self, attr, paced)
                    changed = True
        if changed:
            self._repace()
        if self._rpm is not None and found.requests.remaining is not None:
            self._rpm.sync(found.requests.remaining)
        if self._tpm is not None and found.tokens.remaining is not None:
            self._tpm.sync(found.tokens.remaining)

    def _success_rate(self) -> float:
        """Successes per window over the last few seconds (a sixth of the window)."""
        now = self._clock()
        horizon = self.window / 6.0
        times = self._ok_times
        while times and times[0] < now - horizon:
            times.popleft()
        if len(times) < 5:
            return 0.0  # too few to measure: a cut from this would be a guess
        span = max(now - times[0], horizon / 10.0)
        return len(times) / span * self.window

    def _cut(self, generation: int) -> None:
        """Overload: pace requests at a fraction of what just got through (once per generation,
        so the 429s of requests already in flight count as one signal)."""
        now = self._clock()
        if generation != self._generation or now - self._learned_at < self.window / 12.0:
            return  # let the last cut show its effect before judging it
        # Multiplicative decrease of the pace in force; with none yet, of what got through.
        current = self.rate()
        if current is not None:
            # Paced already: one 429 may be replies arriving bunched; a few close together
            # mean the pace itself is too high.
            horizon = self.window / 12.0
            self._overloads = [t for t in self._overloads if t > now - horizon] + [now]
            if len(self._overloads) < 3:
                return
        base = current or self._success_rate()
        if not base:
            return  # nothing got through yet: no pace to cut from; the pause must do
        self._generation += 1
        self._overloads.clear()
        self._measured_cut = current is None
        self._learned = max(1.0, CUT * base)  # never below one request per window
        self._learned_at = now
        self._repace()

    def _pause(self, seconds: float) -> None:
        """Hold every request on the endpoint for ``seconds``, then restart at the pace."""
        until = self._clock() + seconds
        if until <= self._not_before:
            return
        self._not_before = until
        for bucket in (self._rpm, self._tpm):
            if bucket is not None:
                bucket.hold_until(until)

    # -- feedback ------------------------------------------------------------------------

    def _on_success(
        self,
        value: T,
        tokens: int,
        charge: int,
        used_tokens: Callable[[T], int | None] | None,
        headers: Callable[[T], Mapping[str, str] | None] | None,
    ) -> None:
        self._unfixable = 0
        self._answered = True
        self._recent.append(False)
        self._ok_times.append(self._clock())
        used = used_tokens(value) if used_tokens is not None else None
        if used is not None and self._tpm is not None:
            self._tpm.adjust(used - charge)
        if used is not None and tokens > 0:
            # A plain mean over the first replies (the first one alone sets it: the requests
            # that queued behind it are charged right), then a running average.
            self._token_samples += 1
            weight = max(TOKEN_LEARNING, 1.0 / self._token_samples)
            self._token_scale += weight * (used / tokens - self._token_scale)
        self.stats.tokens += used if used is not None else tokens
        if headers is not None:  # last: what the server says is left beats any refund
            self._learn_headers(parse_rate_headers(headers(value)))

    def _on_failure(self, verdict: Verdict, generation: int, stalled: bool) -> None:
        kind = verdict.kind
        self._answered = True
        self._recent.append(kind is Failure.RATE_LIMIT)
        self._learn_headers(verdict.rates)
        if verdict.unfixable:
            self._unfixable += 1
            if self._unfixable >= STOP_AFTER and self.down is None:
                self.down = EndpointError(
                    f"stopped: every call to {self.url or self.name} (connection "
                    f"'{self.name}') failed: {verdict.cause}",
                    hint="finished rows are kept; fix the endpoint, then continue with "
                    "`flowkit run --resume RUN`",
                )
        if kind is Failure.RATE_LIMIT:
            self.stats.rate_limited += 1
            clustered = sum(self._recent) >= CLUSTER[0]
            if verdict.overload or clustered:
                self.stats.overloads += 1
                # A known limit already sets the pace; only a cluster of 429s says it is wrong
                # (e.g. another client shares the quota).
                known = (self._header_rpm, self._header_tpm, self.limits.rpm, self.limits.tpm)
                if clustered or not any(known):
                    self._cut(generation)
            if verdict.retry_after:
                self._pause(verdict.retry_after)  # the quota is shared: everyone waits
        elif kind is Failure.SERVER:
            self.stats.server_errors += 1
        elif kind is Failure.TIMEOUT:
            self.stats.timeouts += 1
            if stalled:
                self.stats.stalled += 1
        elif kind is Failure.CONNECTION:
            self.stats.connection_errors += 1
        elif kind is Failure.MALFORMED:
            self.stats.malformed += 1


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
            found = _schedulers[key] = Scheduler(
                endpoint.limits, name=endpoint.connection, url=endpoint.url
            )
    return found


def all_schedulers() -> list[Scheduler]:
    """Every scheduler created so far, for run summaries."""
    with _lock:
        return list(_schedulers.values())


def reset_schedulers() -> None:
    """Forget every scheduler and its learned limit (between independent runs, in tests)."""
    with _lock:
        _schedulers.clear()
