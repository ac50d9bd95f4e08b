"""How many requests one endpoint may have in flight while no pace is known (see ``pacing``).

No ramp: an endpoint known to send rate-limit headers (``ratelimits.announces_limits``, or
``slow_start: true``) gets one request alone, whose reply's headers pace the rest; every other
endpoint opens at its full ``concurrency`` (most either announce limits or have none), and the
first overload 429s cut it to one at a time until a pace is measured from what got through.
Any other reply widens a cut window again, by one per window's worth of replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    def __post_init__(self) -> None:
        self.size = float(self.concurrency)

    def limit(self) -> int:
        """Requests in flight allowed now."""
        if not self.answered:
            return 1
        return max(1, min(self.concurrency, int(self.size)))

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
