"""How many requests one endpoint may have in flight while no pace is known (see ``pacing``).

No ramp: an endpoint known to send rate-limit headers (``ratelimits.announces_limits``, or
``slow_start: true``) gets one request alone, whose reply's headers pace the rest; every other
endpoint opens at its full ``concurrency`` (most either announce limits or have none), and the
first overload 429s cut it to one at a time until a pace is measured from what got through.
Any other reply widens a cut window again, by one per window's worth of replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BURST_GAP = 0.01
"""Seconds after the last request of the opening's burst within which the next still joins it:
the executor's workers hand the first wave over as each is built, about a millisecond apart,
and an endpoint farther away than this could not have answered the one before in time to stop
the next. A longer gap (rows that take a while to build) ends the burst: what comes later is
judged by the replies so far."""


@dataclass
class Opening:
    """The in-flight window of one endpoint while it is unpaced."""

    concurrency: int
    """The connection's most requests in flight."""
    answered: bool
    """The endpoint replied once, or need not have before a burst (it announces no limits)."""
    size: float = field(init=False)
    """Requests in flight allowed (the whole ``concurrency`` until an overshoot)."""
    open: bool = True
    """No overload 429 has cut the window yet."""
    measuring: bool = False
    """The opening overshot: the first success sent since then measures the pace."""
    left: int = field(init=False)
    """First attempts still to leave as the opening's burst, whatever earlier replies say."""
    last: float | None = None
    """When the last request of the burst left."""

    def __post_init__(self) -> None:
        self.size = float(self.concurrency)
        self.left = self.concurrency if self.answered else 0

    def limit(self, now: float | None = None) -> int:
        """Requests in flight allowed at ``now``: the whole window while the opening's burst
        may still grow (its members need the slots whatever cut the window meanwhile), else
        what the replies left it. A burst over (more than ``BURST_GAP`` since its last
        request) ends here too: its unused places, fewer requests than the window, must not
        keep the window whole for the retries and later requests that are no part of it."""
        if not self.answered:
            return 1
        if now is not None:
            self.grows(now)  # ends a burst over
        if self.left:
            return self.concurrency
        return max(1, min(self.concurrency, int(self.size)))

    def joins(self, now: float) -> bool:
        """A first attempt is about to leave at ``now``: whether it is one of the opening's
        burst (see ``BURST_GAP``).

        The opening is one burst of the whole window: its requests leave as they are built,
        and against an endpoint a network round trip away all are out before the first reply.
        From one nearby (a millisecond away) a 429 can come back before the last of them is
        built; it still cuts what follows the burst, not the burst itself, so the opening, the
        pace measured from it and the trial of its cut (``refusals``) are the same wherever
        the endpoint is."""
        if self.left <= 0 or (self.last is not None and not self.grows(now)):
            return False
        self.left, self.last = self.left - 1, now
        return True

    def grows(self, now: float) -> float:
        """Seconds the opening's burst may still grow from ``now`` (0: it is over, for good).
        A retry waits them out: no part of the burst, it would take the whole window the
        burst keeps for its members (a 429 asking for less than the burst lasts, from an
        endpoint nearby, would otherwise send the retries of its first members out at the
        full window, over a limit the cut has just found)."""
        if self.left <= 0 or self.last is None:
            return 0.0
        if now - self.last > BURST_GAP:
            self.left = 0
            return 0.0
        return self.last + BURST_GAP - now + BURST_GAP / 100

    def overshot(self) -> None:
        """Overload 429s in the opening: one at a time, and measure."""
        self.open, self.measuring, self.size = False, True, 1.0

    def widen(self) -> None:
        """A reply that says nothing of a rate limit (a success, a 500)."""
        if self.size < self.concurrency:
            self.size += 1.0 / self.size

    def reopen(self) -> None:
        """All at once again: the 429s that cut the window may not be about the rate."""
        self.open, self.measuring, self.size = True, False, float(self.concurrency)
