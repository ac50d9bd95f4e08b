"""Declared rate budgets shared by the runs of one process: the explicit choice that keeps
concurrent runs on one endpoint, together, under the ``rpm`` / ``tpm`` its connection declares.

A connection's ``rpm`` and ``tpm`` describe the provider's quota for that address and key, not
one run's share of it. Each run owns its schedulers (``session``), so two runs in threads of one
process, each pacing itself at the declared rate, would together send twice the quota (measured:
21 of 221 requests rejected, against 0 of 200 for one run). A session therefore draws its
declared budgets from a :class:`SharedEndpoints`: the process's own (:data:`PROCESS`), which
sessions join by default, or one given to it, or none (``LlmSession(shared=None)``: the run keeps
its budgets to itself, as a scale-out worker that was handed its share of them does).

Budgets are keyed by the endpoint's address and a digest of its key (what a provider's quota
is counted by), and by the declared value: runs that declare the same limit for the same
endpoint share it; every model called through the connection draws from it, as the connection's
declaration says. Learned paces (from headers and 429s) stay per run and per model.

Runs in threads have different event loops, and asyncio primitives cannot cross loops: a budget
is a token bucket whose reservations are made under a ``threading.Lock`` (never held across an
await); each caller then sleeps in its own loop until its reservation falls due.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

from flowkit.llm.budget import TokenBucket

if TYPE_CHECKING:  # a run opens its session whether or not it calls a model: stay light
    from flowkit.llm.endpoint import Endpoint


class SharedBucket:
    """A :class:`~flowkit.llm.budget.TokenBucket` of ``per_minute`` units that callers in any
    thread and event loop draw from; the real clock, a one-minute window.

    Its burst is half a second's worth, not a second's as a run's own bucket: requests drawn
    from several event loops (threads sharing the GIL) leave later than their turn more often
    than one loop's do, and a group held back and sent with the next one must still fit the
    provider's one-second slice (measured: a second's burst had one request of 41 rejected now
    and then under load; half left none)."""

    def __init__(self, per_minute: float) -> None:
        self._lock = threading.Lock()
        burst = max(1.0, per_minute / 120.0)
        self._bucket = TokenBucket(per_minute, window=60.0, burst=burst, clock=time.monotonic)

    @property
    def rate(self) -> float:
        """Units per minute."""
        return self._bucket.rate * 60.0

    def _shift(self) -> float:
        with self._lock:
            return self._bucket._shift

    async def acquire(self, amount: float = 1.0) -> float:
        """Wait, in the caller's own event loop, until ``amount`` fits; the seconds waited."""
        with self._lock:
            shift = self._bucket._shift
            wait = total = self._bucket.reserve(amount)
        try:
            while wait > 0:
                await asyncio.sleep(wait)
                # A pause another run was asked for meanwhile moves this turn too.
                now = self._shift()
                wait, shift = now - shift, now
                total += wait
        except asyncio.CancelledError:
            self.adjust(-amount)
            raise
        return total

    def adjust(self, delta: float) -> None:
        """Charge ``delta`` more (a refund when negative) once the true cost is known."""
        with self._lock:
            self._bucket.adjust(delta)

    def hold_for(self, seconds: float) -> None:
        """Refill only after ``seconds`` (a server asked every caller of the quota to wait)."""
        with self._lock:
            self._bucket.hold_until(time.monotonic() + seconds)

    @property
    def level(self) -> float:
        """Units available right now (negative while in debt)."""
        with self._lock:
            return self._bucket.level


class DeclaredBudget:
    """The declared request and token budgets one scheduler draws from (either may be None)."""

    __slots__ = ("rpm", "tpm")

    def __init__(self, rpm: SharedBucket | None, tpm: SharedBucket | None) -> None:
        self.rpm = rpm
        self.tpm = tpm


def address(endpoint: Endpoint) -> tuple[str, ...]:
    """What a provider counts a quota by: the address (kind, URL, API version, deployment) and
    a digest of the key; not the connection's name (two names for one key share its quota)."""
    return endpoint.identity()[1:-1]


class SharedEndpoints:
    """Declared budgets per endpoint address and declared value, shared by the sessions that
    join it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[tuple[object, ...], SharedBucket] = {}

    def _bucket(self, where: tuple[str, ...], what: str, per_minute: int) -> SharedBucket:
        from flowkit.llm.pacing import HEADER_MARGIN  # paced as a pacer paces a known limit

        key = (*where, what, per_minute)
        with self._lock:
            found = self._buckets.get(key)
            if found is None:
                found = self._buckets[key] = SharedBucket(per_minute * HEADER_MARGIN)
            return found

    def budget(self, endpoint: Endpoint) -> DeclaredBudget | None:
        """The budgets ``endpoint``'s connection declares, or None if it declares none."""
        limits = endpoint.limits
        if not limits.rpm and not limits.tpm:
            return None
        where = address(endpoint)
        return DeclaredBudget(
            self._bucket(where, "rpm", limits.rpm) if limits.rpm else None,
            self._bucket(where, "tpm", limits.tpm) if limits.tpm else None,
        )

    def clear(self) -> None:
        """Forget every budget (runs still holding one keep drawing from it alone)."""
        with self._lock:
            self._buckets.clear()


PROCESS = SharedEndpoints()
"""The process's shared budgets, which every session joins unless told otherwise."""
