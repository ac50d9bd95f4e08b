"""One scheduler per endpoint and model in a run, shared by every node and row of the run.

A run's session (``session``) holds its schedulers: two runs never share one, but their
declared ``rpm`` / ``tpm`` budgets are shared through ``shared`` so that runs in one process
together stay under them. Providers limit each model (each Azure deployment) on its own, so
learned paces are per model too.

It drives an endpoint at its real limit without storming it. Requests in flight are bounded by
the connection's ``concurrency``; on top of that the *rate* of requests and of tokens is paced
by token buckets, because at 20 ms a reply even one request in flight can be many times a
per-minute cap. The paces (configured, from ``x-ratelimit-*`` headers, or learned from 429s) and
the opening of an endpoint whose limits are unknown live in ``pacing``.

What a 429 says is read by ``refusals``. Where it shows the quota spent (headers, or most recent
replies refused), its Retry-After pauses the **whole endpoint**, and the buckets restart empty;
otherwise it holds its own request only. A 5xx is a fault, retried without cutting the pace.

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
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict

from flowkit.errors import EndpointError
from flowkit.llm.budget import Clock, Sleep
from flowkit.llm.charging import OverBudget, within_budget
from flowkit.llm.endpoint import Limits
from flowkit.llm.learner import UsageScale
from flowkit.llm.memory import Recalled
from flowkit.llm.pacing import Pacer
from flowkit.llm.ratelimits import parse_rate_headers
from flowkit.llm.refusals import Refusals
from flowkit.llm.retry import Failure, Verdict, backoff, classify
from flowkit.llm.shared import DeclaredBudget
from flowkit.llm.stalls import Stalled, StallWatch
from flowkit.llm.stats import Attempted, SchedulerStats, T

STOP_AFTER = 5
"""Unfixable failures in a row, with no success between, that mark an endpoint down."""


class Scheduler:
    """Admission control, rate pacing and retries for one endpoint.

    ``window`` (the span rpm/tpm and header limits count over), ``clock``, ``sleep``, ``rng``
    and ``stall_floor`` are injectable so tests can compress a minute into seconds.
    ``declared``: where the configured rpm/tpm are drawn from when other runs share them
    (``shared``); None paces them here alone.
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
        model: str = "",
        declared: DeclaredBudget | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.model = model
        self.limits = limits
        self.stats = SchedulerStats()
        self.window = window
        self._stalls = StallWatch(limits.timeout, stall_floor)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._pacer = Pacer(
            limits, window=window, clock=clock, sleep=sleep, declared=declared, url=url
        )
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._usage = UsageScale()
        self._refusals = Refusals()
        self._unfixable = 0
        self.down: Exception | None = None

    # -- introspection -------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """Most requests in flight at once: the connection's ``concurrency``, but one until the
        first reply of an endpoint known to send rate-limit headers (they say what a burst may
        be), and one at a time after an opening that overshot (see ``pacing``)."""
        return self._pacer.in_flight_limit

    @property
    def in_flight(self) -> int:
        """Attempts holding a slot right now."""
        return self._in_flight

    def rate(self) -> float | None:
        """The request pace in requests per window, or None while unpaced."""
        return self._pacer.rate()

    def token_rate(self) -> float | None:
        """The token pace in tokens per window, or None while unpaced."""
        return self._pacer.token_rate()

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

    def remembered(self) -> Recalled | None:
        """What the next run on this endpoint should open with (see ``memory``)."""
        found = self._pacer.remembered()
        return None if found is None else Recalled(*found)

    def recall(self, found: Recalled) -> None:
        """Open where the endpoint's last run left off (see ``memory``)."""
        self._pacer.recall(found.window, found.rate)

    def snapshot(self) -> dict[str, int | str | float | None]:
        """Counters plus the limits in force, for run records and progress."""
        return {
            "endpoint": self.name,
            "model": self.model,
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
        on_arrival: bool = False,
        detail: str = "",
        cap: str = "max_tokens",
        rule: str = "",
        rules: Mapping[str, int] | None = None,
    ) -> Attempted[T]:
        """Run ``call`` under the endpoint's limits, retrying what is worth retrying.

        ``tokens`` is the estimate charged to the token pace before sending. With
        ``on_arrival`` it is what the endpoint charges as the request arrives (see
        ``charging``): kept whatever the reply uses, so a short reply gives nothing back.
        Otherwise the endpoint charges by usage: ``used_tokens`` extracts the real count from
        the result to correct the estimate afterwards. Either way the estimate is scaled by
        what the rate-limit headers (``headers`` extracts the reply's) show the endpoint really
        charges. ``detail`` says how ``tokens`` was counted and ``cap`` names the request's
        output cap, for the refusal of a request that alone exceeds the token budget
        (``OverBudget``, before anything is sent). ``rule`` is the ``token_charge`` rule
        ``tokens`` was counted by and ``rules`` what the request costs by each rule
        (``usage``: its reservation): where the headers show the endpoint charges by another
        rule (``learner``), the request is charged by that one.
        ``timeout`` (default: the endpoint's) bounds each attempt, not the waiting. Raises the
        last attempt's error once retries are exhausted, a non-retryable error (400, 401,
        404…) at once, and ``EndpointError`` once the endpoint is down.
        """
        ceiling = timeout if timeout is not None else self.limits.timeout
        self.stats.calls += 1
        retry = 0
        while True:
            self._check_down()
            if retry:  # no part of the opening's burst: after it (``opening.Opening.grows``)
                await self._pacer.burst_over()
            await self._acquire()
            # One of the opening's burst leaves as sent with it (``opening.Opening.joins``).
            burst = retry == 0 and self._pacer.opening.joins(self._clock())
            generation = 0 if burst else self._pacer.generation
            delay = 0.0
            charge = 0
            ticket: int | None = None
            try:
                # A slot taken before a pause (or a cut) may not fit the window it left (an
                # overload 429 at the opening shrinks it to one): give it back and queue again.
                if not burst:
                    await self._pacer.pause_over()
                    if self._in_flight > self.limit:
                        continue  # the finally gives the slot back
                await self._pacer.token_room()
                # The estimate, scaled by how far off past estimates were, by the rule the
                # headers show (reckoned as late as can be: both may have moved meanwhile).
                learner = self._pacer.learner
                learned, found, switches = learner.scale, learner.rule, learner.switches
                cost, arrival, how, by = tokens, on_arrival, detail, rule
                if rules and found is not None and found in rules:
                    cost, arrival, by = rules[found], found != "usage", found
                    how = f"by {found}, the rule the endpoint's rate-limit headers show"
                scale = learned * (1.0 if arrival else self._usage.scale)
                charge = max(1, round(cost * scale)) if cost > 0 else 0
                limit, where = self._pacer.token_limit(), self.url or self.name
                try:
                    charge = within_budget(charge, limit, where, how, arrival, cap)
                except OverBudget:
                    self.stats.errors += 1
                    raise
                ticket, charge = await self._pacer.admit(charge, learned, rules, by)
                if learner.switches != switches:  # reckoned by a rule found wrong meanwhile:
                    self._pacer.refund(ticket, 0)  # (its turn, given back, would go twice)
                    continue  # reckoned again (the finally gives the slot back)
                self._check_down()
                self.stats.requests += 1
                mark = self._refusals.sent(burst)
                try:
                    value = await self._stalls.run(ceiling, call)
                except Exception as exc:
                    stalled = isinstance(exc, Stalled)
                    verdict = classify(exc)
                    # Providers do not bill failed calls; a 429's tokens stay spent (see refund).
                    self._pacer.refund(ticket, charge, verdict.kind is Failure.RATE_LIMIT)
                    self._on_failure(verdict, generation, stalled, charge, mark)
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
                    used = None if used_tokens is None else used_tokens(value)
                    if used is not None:
                        learner.used(ticket, used)
                    self._on_success(generation, cost, charge, used, arrival, mark)
                    # Before its headers: the reading may then measure the span it ends.
                    self._pacer.ended(ticket)
                    if headers is not None:  # last: what the server says is left beats a refund
                        self._pacer.learn_headers(parse_rate_headers(headers(value)))
                    return Attempted(value, retry + 1)
            finally:
                if ticket is not None:  # a cancelled attempt may have been charged: it stands
                    self._pacer.ended(ticket)
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

    # -- feedback ------------------------------------------------------------------------

    def _on_success(
        self,
        generation: int,
        tokens: int,
        charge: int,
        used: int | None,
        on_arrival: bool,
        mark: tuple[int, int],
    ) -> None:
        self._unfixable = 0
        self._pacer.answered(True, generation)
        self._pacer.follow(self._refusals.reply(mark, False))
        if on_arrival or used is None:
            self.stats.charged_tokens += charge
        else:
            # Charged by usage: settle to what the reply used (scaled as the headers show).
            settled = round(used * self._pacer.learner.scale)
            self._pacer.charge(settled - charge)
            self.stats.charged_tokens += settled
        if used is not None and tokens > 0 and not on_arrival:
            self._usage.used(used, tokens)
        self.stats.tokens += used if used is not None else tokens

    def _on_failure(
        self, verdict: Verdict, generation: int, stalled: bool, charge: int, mark: tuple[int, int]
    ) -> None:
        kind = verdict.kind
        self._pacer.answered(False, generation, rate_limited=kind is Failure.RATE_LIMIT)
        self._pacer.follow(self._refusals.reply(mark, kind is Failure.RATE_LIMIT))
        self._pacer.learn_headers(verdict.rates)
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
            seen = self._refusals.read(verdict, charge)
            if seen.overload:
                self.stats.overloads += 1
                # A known limit already sets the pace; only a cluster of 429s says it is wrong
                # (e.g. another client shares the quota). The opening's cut is put on trial
                # (were the 429s about the rate?) unless they clustered.
                paced = seen.clustered or not self._pacer.limits_known()
                if paced and self._pacer.cut(generation) and not seen.clustered:
                    self._refusals.cut()
            if seen.hold and verdict.retry_after:
                self._pacer.pause(verdict.retry_after)  # the quota is shared: everyone waits
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
