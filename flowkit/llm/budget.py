"""Requests-per-minute and tokens-per-minute budgets as lock-free token buckets.

Each acquisition reserves its share synchronously (no ``await`` between reading and
updating the level) and then sleeps until the reservation is due.  That makes callers
served in arrival order without an ``asyncio.Lock`` — locks bind to the first event loop
that contends them, and the engine may run several loops over a process's life.

The bucket may go into debt: a request larger than the burst capacity waits until the
bucket is full and then drives the level negative, so the long-run rate stays exact even
when single requests exceed one second's worth of budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

POLL = 0.02
"""Longest a queued turn sleeps before looking again: an endpoint's reading may move it
earlier (``TokenBucket.raise_to``), and a sleeping turn cannot be woken."""


class TokenBucket:
    """``per_window`` units per ``window`` seconds, with a burst of 1/60 of the window.

    The burst is kept small on purpose: providers enforce per-minute limits over
    sub-minute slices, so spending a whole minute's budget in the first second of a run
    earns 429s.  ``window`` exists so tests can compress a minute into milliseconds.
    """

    def __init__(
        self,
        per_window: float,
        *,
        window: float = 60.0,
        burst: float | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if per_window <= 0 or window <= 0:
            raise ValueError("per_window and window must be positive")
        self.rate = per_window / window
        self.capacity = max(1.0, burst if burst is not None else per_window / 60.0)
        self._clock = clock
        self._sleep = sleep
        self._level = self.capacity
        self._stamp = clock()
        self._shift = 0.0  # seconds queued reservations were moved later (pauses, syncs)

    def _refill(self) -> None:
        now = self._clock()
        if now > self._stamp:  # a hold (see ``hold_until``) puts the stamp in the future
            self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
            self._stamp = now

    def set_rate(self, per_window: float, window: float = 60.0) -> None:
        """Change the pace (a limit learned from headers or from 429s); the level is kept."""
        self._refill()
        self.rate = per_window / window
        self.capacity = max(1.0, per_window / 60.0)
        self._level = min(self._level, self.capacity)

    def _due(self) -> float:
        """When the level will be back to zero: reservations already made fall due in order
        behind it, so moving it later moves them all."""
        return max(self._stamp, self._clock()) + max(0.0, -self._level) / self.rate

    def hold_until(self, when: float) -> None:
        """Empty the bucket and refill it only from ``when`` (the end of a server-requested
        pause), so requests that queued during the pause leave at the pace, not in a burst."""
        self._refill()
        due = self._due()
        self._level = min(self._level, 0.0)
        self._stamp = max(self._stamp, when)
        self._shift += max(0.0, self._due() - due)

    def sync(self, remaining: float) -> None:
        """Believe the server when it says less is left than this bucket thinks."""
        self._refill()
        due = self._due()
        self._level = min(self._level, remaining)
        self._shift += max(0.0, self._due() - due)

    def raise_to(self, level: float) -> None:
        """Believe the server when it says more is left than this bucket thinks (``level``:
        what it reported, less what it may not have charged yet): the turns queued move
        earlier by as much. Not during a server-requested pause (see ``hold_until``)."""
        self._refill()
        if self._stamp > self._clock() or level <= self._level:
            return
        due = self._due()
        self._level = min(self.capacity, level)
        self._shift += self._due() - due

    def release(self) -> None:
        """Let every queued turn go now: the pace this bucket kept was dropped."""
        self._refill()
        due = self._due()
        self._level, self._stamp = self.capacity, min(self._stamp, self._clock())
        self._shift += self._due() - due

    async def room(self, ahead: float) -> None:
        """Wait while more than ``ahead`` seconds of the pace are booked."""
        while (over := -self.level - self.rate * ahead) > 0:
            await self._sleep(over / self.rate)

    async def top_up(self, amount: float) -> None:
        """Take ``amount`` more for a request whose turn has come (its charge turned out
        higher): it waits for them, and every turn booked behind it moves later as much, as
        if it had booked them with its own."""
        self._refill()
        due = self._due()
        self._level -= amount
        self._shift += max(0.0, self._due() - due)
        if self._level < 0:
            await self._sleep(min(amount, -self._level) / self.rate)

    def reserve(self, amount: float) -> float:
        """Take ``amount`` now and return how many seconds the caller must wait before using it."""
        self._refill()
        need = min(amount, self.capacity)
        wait = 0.0 if self._level >= need else (need - self._level) / self.rate
        wait += max(0.0, self._stamp - self._clock())
        self._level -= amount
        return wait

    async def acquire(self, amount: float = 1.0) -> float:
        """Wait until ``amount`` fits the budget; returns the seconds waited."""
        shift = self._shift
        start = self._clock()
        due = start + self.reserve(amount)
        try:
            while (wait := due - self._clock()) > 0:
                await self._sleep(min(wait, POLL))
                # A pause or a server's count that came meanwhile moves this turn too (later
                # if lower than this bucket thought, earlier if higher).
                due, shift = due + self._shift - shift, self._shift
        except asyncio.CancelledError:
            self.adjust(-amount)
            raise
        return max(0.0, self._clock() - start)

    def adjust(self, delta: float) -> None:
        """Charge ``delta`` more units (or refund, if negative) once the true cost is known."""
        self._refill()
        self._level = min(self.capacity, self._level - delta)

    @property
    def level(self) -> float:
        """Units available right now (negative while in debt)."""
        self._refill()
        return self._level


class Bucket(Protocol):
    """This run's TokenBucket, or a budget shared with other runs (flowkit.llm.shared)."""

    async def acquire(self, amount: float) -> float: ...

    def adjust(self, delta: float) -> None: ...


async def take(rpm: Bucket | None, tpm: Bucket | None, tokens: int) -> None:
    """One request from ``rpm`` and ``tokens`` from ``tpm`` (this run's buckets, or the budgets
    shared with other runs: both acquire and adjust alike); the request is given back if the
    wait for tokens is cancelled."""
    if rpm is not None:
        await rpm.acquire(1)
    if tpm is not None and tokens > 0:
        try:
            await tpm.acquire(tokens)
        except asyncio.CancelledError:
            if rpm is not None:
                rpm.adjust(-1)
            raise
