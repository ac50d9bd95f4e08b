"""How fast one endpoint may be called: its request and token paces, and, while no pace is
known, how many requests may be in flight.

The :class:`Pacer` belongs to a ``Scheduler`` (one per endpoint), which asks it for the in-flight
limit, waits in :meth:`Pacer.admit` before each attempt, and tells it what replies said. The pace
comes from three sources, the lowest winning:

- the connection's configured ``rpm`` / ``tpm``;
- the ``x-ratelimit-*`` headers of replies (limit → pace, remaining → level; see ``ratelimits``);
- 429s that prove overload, when there are no headers: the request rate is cut to a fraction of
  the success rate just measured and probed back up additively (AIMD on the rate, one cut per
  generation), so it settles just under the cap.

While no pace is known, ``opening`` bounds the requests in flight instead: all at once (no
ramp), or one alone where its reply's headers will pace the rest.

A configured ``rpm`` / ``tpm`` may be drawn from a shared ``DeclaredBudget`` (``shared``), so
every run of the process on the endpoint draws from one budget.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from flowkit.llm.booked import BOOKED_AHEAD, Booked, Rules
from flowkit.llm.budget import Clock, Sleep, TokenBucket, take
from flowkit.llm.endpoint import Limits
from flowkit.llm.learner import ChargeLearner
from flowkit.llm.opening import Opening
from flowkit.llm.ratelimits import Advertised, RateHeaders, announces_limits
from flowkit.llm.refusals import Step
from flowkit.llm.successes import CLIMB, CUT, FIRST_CUT, PROBE, REMEASURE, rate_since, success_rate

if TYPE_CHECKING:
    from flowkit.llm.shared import DeclaredBudget

HEADER_MARGIN = 0.97
"""Fraction of a known limit (configured or from headers) to pace at: the client's and the
server's clocks and windows never align exactly, and replies arrive bunched."""


class Pacer:
    """The paces of one endpoint (token buckets) and its in-flight window while none is known.

    ``window`` is the span rpm/tpm and header limits count over; ``declared``, where the
    configured rpm/tpm are drawn from when they are shared with other runs; ``url``, the
    endpoint's (whether it is known to announce its limits decides the opening).
    """

    def __init__(
        self,
        limits: Limits,
        *,
        window: float,
        clock: Clock,
        sleep: Sleep,
        declared: DeclaredBudget | None = None,
        url: str = "",
    ) -> None:
        self.limits, self.declared, self.window = limits, declared, window
        self._clock, self._sleep = clock, sleep
        self.generation = 0
        """Bumped by every cut: the 429s of requests sent before it count as one signal."""
        self.not_before = 0.0
        # Requests per window from each source; the pace is the lowest known.
        self._told = Advertised()  # by the headers
        self.booked = Booked()
        """What the token pace booked for requests not yet answered (see ``booked``)."""
        self.learner = ChargeLearner()
        """What the endpoint really charges, against the estimates (see ``charging``)."""
        self._learned: float | None = None  # requests per window, from overload 429s
        self._learned_at = -float("inf")
        self._dropped: float | None = None  # the learned pace a reopening dropped
        self._measured_cut = False
        self._overloads: list[float] = []  # times of recent overload 429s while paced
        self._rpm: TokenBucket | None = None
        self._tpm: TokenBucket | None = None
        self._ok_times: deque[float] = deque()
        alone = limits.slow_start  # one request first where its reply's headers pace the rest
        answered = not (announces_limits(url) if alone is None else alone)
        self.opening = Opening(limits.concurrency, answered)
        """The in-flight window while no pace is known (see ``opening``)."""
        self.repace()

    # -- what is in force ----------------------------------------------------------------

    @property
    def in_flight_limit(self) -> int:
        """One until a reply's headers may say what a burst may be; then the concurrency, but
        one at a time from an overshoot until a pace is measured (see ``opening``)."""
        if self.opening.answered and (self.rate() or self.token_rate()):
            return self.limits.concurrency
        return self.opening.limit(self._clock())

    def rate(self) -> float | None:
        """The request pace in requests per window, or None while unpaced."""
        told = self.limits.rpm * HEADER_MARGIN if self.limits.rpm else None
        known = [r for r in (told, self._told.rpm, self._probed()) if r]
        return min(known) if known else None

    def token_rate(self) -> float | None:
        """The token pace in tokens per window, or None while unpaced."""
        told = self.limits.tpm * HEADER_MARGIN if self.limits.tpm else None
        known = [r for r in (told, self._told.tpm) if r]
        return min(known) if known else None

    def token_limit(self) -> int | None:
        """The whole tokens-per-window budget, configured or advertised (the lower), if known:
        a request charged more could never be sent."""
        known = [t for t in (self.limits.tpm, self._told.token_limit) if t]
        return min(known) if known else None

    def limits_known(self) -> bool:
        """Whether a configured or advertised limit sets the pace (429s then do not cut it)."""
        known = (self._told.rpm, self._told.tpm, self.limits.rpm, self.limits.tpm)
        return any(known)

    # -- across runs (see ``memory``) -----------------------------------------------------

    def remembered(self) -> tuple[int | None, float | None] | None:
        """(None, requests per minute learned from overload) for the next run to open with (the
        window is no longer learned: every run opens at its concurrency); (None, None) when
        whatever was kept should be forgotten (paced by headers now, or answered at full
        concurrency without an overload); None when this run learned nothing new."""
        if self._told.rpm or self._told.tpm:
            return None, None
        if self._learned is not None:
            learned = self._probed()
            return None, None if learned is None else learned * 60.0 / self.window
        if self.opening.answered and self.opening.open and self._ok_times:
            return None, None
        return None

    def recall(self, window: int | None, rpm: float | None) -> None:
        """Open where the endpoint's last run left off: at its learned pace (climbing until a
        cut says where the cap is). A window kept by an older flowkit is ignored: every run
        opens at its concurrency now."""
        if rpm:
            self.opening.answered, self.opening.open, self._measured_cut = True, False, True
            self.opening.left = 0
            self._learned = rpm * self.window / 60.0
            self._learned_at = self._clock()
            self.repace()

    # -- waiting -------------------------------------------------------------------------

    async def burst_over(self) -> None:  # until the opening's burst can grow no more
        while (left := self.opening.grows(self._clock())) > 0:
            await self._sleep(left)

    async def pause_over(self) -> None:
        """Wait out a server-requested pause."""
        while (pause := self.not_before - self._clock()) > 0:
            await self._sleep(pause)

    async def token_room(self) -> None:
        """Wait while the token pace is booked more than ``BOOKED_AHEAD`` seconds ahead: a
        request reckons its charge after this, so few are charged at a scale shown wrong since."""
        if self._tpm is not None:
            await self._tpm.room(BOOKED_AHEAD)

    async def admit(
        self, tokens: int, scale: float = 1.0, rules: Rules = None, rule: str = ""
    ) -> tuple[int, int]:
        """Wait for the request and token paces (after :meth:`pause_over`: a pause that starts
        meanwhile holds the buckets too); ``tokens`` were reckoned by ``rule`` at the learner's
        ``scale`` (``rules``: see ``ChargeLearner.sent``). Returns its ticket (for
        :meth:`refund` or :meth:`ended`) and its charge at the scale in force when it leaves."""
        learner = self.learner
        switches = learner.switches
        if self._learned is not None:
            self.repace()  # the probe moves the learned rate with time
        shared = self.declared
        if shared is not None:
            await self._draw(shared, tokens)
        # Booked at a hedge until spans measure the charge (``learner.HEDGE``), reckoned when
        # the request's turn comes: a hedge reckoned on queueing outlives its lifting.
        booked = 0
        try:
            await take(self._rpm, None, 0)
            try:
                if tokens > 0:
                    await self.token_room()
                booked = self.booked.book(self._tpm, round(tokens * self.learner.hedge))
                await take(None, self._tpm, booked)
            except asyncio.CancelledError:
                if self._rpm is not None:
                    self._rpm.adjust(-1)
                raise
            # Booked at a scale the headers have moved since: top up (or give back) in place,
            # so the turns behind move too (see benchmarks/RESULTS.md, Pacing, round 4); not
            # once the rule changed (the scale is then one on another rule's estimates).
            while tokens and switches == learner.switches and abs(learner.scale / scale - 1) > 0.02:
                now = learner.scale
                extra = round(tokens * now / scale) - tokens
                scale = now
                booked += self.booked.book(self._tpm, extra)
                if extra < 0:
                    self._adjust(extra)  # booked too much: give the rest back
                elif extra > 0:
                    if shared is not None:
                        await self._draw(shared, extra)
                    if self._tpm is not None:
                        await self._tpm.top_up(extra)
                tokens += extra
        except BaseException:
            self.booked.dropped(booked)
            raise
        ticket = self.learner.sent(self._clock(), tokens, scale, rules, rule)
        self.booked.sent(ticket, booked)
        return ticket, tokens

    async def _draw(self, shared: DeclaredBudget, tokens: int) -> None:
        """Wait for the declared budgets shared with other runs."""
        await take(shared.rpm, shared.tpm, tokens)
        # A server-requested pause that began while this request waited holds it too.
        await self.pause_over()

    def refund(self, ticket: int, tokens: int, rate_limited: bool = False) -> None:
        """The request of ``ticket``, charged ``tokens``, failed: the endpoint took nothing.
        Given back, but not for a 429 (refused for want of room: given back, the next turn
        booked shared the last one's, and the pair overran the budget again)."""
        self.learner.refused(ticket, self._clock())
        self.booked.done(ticket)
        if not rate_limited:
            self._adjust(-tokens)

    def ended(self, ticket: int) -> None:
        """The request of ``ticket`` was answered, or given up (what it was charged stands)."""
        self.learner.ended(ticket)
        self.booked.done(ticket)

    def charge(self, tokens: int) -> None:
        """Charge ``tokens`` more (fewer, if negative): a usage-charged reply settling."""
        self.learner.charged(tokens, self._clock())
        self._adjust(tokens)

    def _adjust(self, tokens: int) -> None:
        if self._tpm is not None and tokens:
            self._tpm.adjust(tokens)
        if self.declared is not None and self.declared.tpm is not None and tokens:
            self.declared.tpm.adjust(tokens)

    # -- feedback ------------------------------------------------------------------------

    def answered(self, ok: bool, generation: int, *, rate_limited: bool = False) -> None:
        """The endpoint replied to a request sent in ``generation``. Any reply but a 429 widens
        a window cut by an overshoot (a 500 or a refusal says nothing about a rate limit); a
        success may end the measurement that follows the overshoot."""
        self.opening.answered = True
        if rate_limited:
            return
        if ok:
            self._ok_times.append(self._clock())
            if self.opening.measuring and generation == self.generation:
                # Sent after the overshoot's pause, so every request of the opening has landed
                # and the successes count what the endpoint let through.
                self._cut_to(
                    success_rate(self._ok_times, self._clock(), self.window), measured=True
                )
                return
        self.opening.widen()

    def learn_headers(self, found: RateHeaders | None) -> None:
        """Pace by the limits a reply advertises and level the buckets to what is left."""
        if found is None:
            return
        if self._told.learn(found, HEADER_MARGIN):
            self.repace()
        tokens, told = found.tokens, self._told
        limit = told.token_limit or self.limits.tpm or told.most_left["tpm"]
        if tokens.remaining is not None and limit:
            now = self._clock()
            self.learner.reading(now, tokens.remaining, limit, tokens.reset, self.window)
        if self._rpm is not None and found.requests.remaining is not None:
            self._rpm.sync(found.requests.remaining)
        if self._tpm is not None and found.tokens.remaining is not None:
            self._tpm.sync(found.tokens.remaining)
            # More left than booked: an over-estimate costs only the requests booked since.
            self.booked.resync(self._tpm, found.tokens.remaining)

    def cut(self, generation: int) -> bool:
        """Overload: pace requests at a fraction of what just got through (once per generation,
        so the 429s of requests already in flight count as one signal). Whether this cut the
        opening window (see ``refusals``: that cut may be put on trial)."""
        now = self._clock()
        if generation != self.generation:
            return False  # sent before the last cut: its 429 says nothing about the pace since
        current = self.rate()
        if current is not None and self._learned is not None and not self.limits_known():
            # A pace learned from 429s alone: what got through since it was set measures the
            # cap once the endpoint's burst allowance is spent (a measure taken in the opening
            # counts that allowance, which may be ten seconds' worth or more). Far below the
            # pace, it is the cap: go to it now, not after the hold below.
            since = rate_since(self._ok_times, self._learned_at, now, self.window)
            if since and since < current * REMEASURE:
                self._cut_to(since, measured=True)
                return False
        if now - self._learned_at < self.window / 12.0:
            return False  # let the last cut show its effect before judging it
        if current is None and self.opening.open:
            # The opening overshot. The successes known now undercount what got through (many
            # requests are still in flight): send one request at a time (after the pause) and
            # measure when the first of them succeeds.
            self.opening.overshot()
            self.generation += 1
            return True
        if current is not None:
            # Paced already: one 429 may be replies arriving bunched; a few close together
            # mean the pace itself is too high.
            horizon = self.window / 12.0
            self._overloads = [t for t in self._overloads if t > now - horizon] + [now]
            if len(self._overloads) < 3:
                return False
        # Multiplicative decrease of the pace in force; with none yet, of what got through.
        self._cut_to(
            current or success_rate(self._ok_times, self._clock(), self.window),
            measured=current is None,
        )
        return False

    def _cut_to(self, base: float, *, measured: bool) -> None:
        if not base:
            return  # nothing got through yet: no pace to cut from; the pause must do
        self.generation += 1
        self._overloads.clear()
        self.opening.measuring = False
        self._measured_cut = measured
        # Never below one request per window.
        self._learned = max(1.0, (FIRST_CUT if measured else CUT) * base)
        self._learned_at = self._clock()
        self.repace()
        if self._rpm is not None:  # the 429s say the endpoint's budget is spent: no burst now
            self._rpm.hold_until(self._learned_at)

    def follow(self, step: Step | None) -> None:
        """Do what the trial of the opening's cut asks (see ``refusals``): open the full window
        again, unpaced (keeping the learned pace), or pace as before that again."""
        if step is Step.REOPEN:
            if self._rpm is not None:
                self._rpm.release()
            self._dropped, self._learned, self._rpm = self._probed(), None, None
            self._learned_at = -float("inf")
            self.opening.reopen()
            self._measured_cut = False
            self.generation += 1
            self.repace()
        elif step is Step.RESTORE:
            self.opening.open = False
            if self._dropped:
                self._cut_to(self._dropped / FIRST_CUT, measured=True)
            else:  # none was measured: one at a time, and measure
                self.opening.overshot()
                self.generation += 1

    def pause(self, seconds: float) -> None:
        """Hold every request on the endpoint for ``seconds``, then restart at the pace."""
        until = self._clock() + seconds
        if until <= self.not_before:
            return
        self.not_before = until
        for bucket in (self._rpm, self._tpm):
            if bucket is not None:
                bucket.hold_until(until)
        if self.declared is not None:  # the quota is shared: every run on it waits
            for shared in (self.declared.rpm, self.declared.tpm):
                if shared is not None:
                    shared.hold_for(seconds)

    # -- internals -----------------------------------------------------------------------

    def _probed(self) -> float | None:
        if self._learned is None:
            return None
        steps = max(0.0, self._clock() - self._learned_at) / (self.window / 60.0)
        growth = CLIMB if self._measured_cut else PROBE
        return self._learned * (1.0 + growth * steps)

    def _own_paces(self) -> tuple[float | None, float | None]:
        """The paces this pacer's own buckets hold: all of them, or with declared budgets
        shared, only those headers and 429s taught it."""
        if self.declared is None:
            return self.rate(), self.token_rate()
        learned = [r for r in (self._told.rpm, self._probed()) if r]
        return (min(learned) if learned else None), self._told.tpm

    def repace(self) -> None:
        """Make the buckets follow the current paces (creating them when a pace appears)."""
        own_rpm, own_tpm = self._own_paces()
        for attr, rate in (("_rpm", own_rpm), ("_tpm", own_tpm)):
            bucket: TokenBucket | None = getattr(self, attr)
            if rate is None:
                continue
            if bucket is None:
                new = TokenBucket(rate, window=self.window, clock=self._clock, sleep=self._sleep)
                setattr(self, attr, new)
            elif abs(bucket.rate * self.window - rate) > 1e-9 * rate:
                bucket.set_rate(rate, self.window)
