"""How fast an endpoint answered, from the times of its recent successes: the rate the pacer
cuts to when 429s show overload and no limit is known (see ``pacing``). Each function drops
the times older than a sixth of the window from the deque it is given. The constants say how
far a cut goes and how fast the pace climbs back after it.
"""

from __future__ import annotations

from collections import deque

# How a cut moves the pace (AIMD on the request rate, see ``pacing``).
CUT = 0.9
"""On overload while paced, the learned rate becomes this fraction of the pace in force."""
FIRST_CUT = 0.95
"""On the first overload, the learned rate becomes this fraction of the success rate measured."""
REMEASURE = 0.5
"""A 429 while paced by 429s alone re-measures the pace from the successes since the last cut
when those come under this fraction of the pace (the first measure counted a burst)."""
PROBE = 0.002
"""After a paced cut the rate grows by this fraction of itself per 1/60 of the window (slowly)."""
CLIMB = 0.005
"""After the first cut the rate grows by this fraction of itself per 1/60 of the window, until
a paced cut says where the cap is."""


def rate_since(times: deque[float], start: float, now: float, window: float) -> float:
    """Successes per window since ``start``, once at least five came over at least a slice
    (1/60) of the window; else 0."""
    horizon = now - window / 6.0
    while times and times[0] < horizon:
        times.popleft()
    start = max(start, horizon)
    count = sum(1 for t in times if t > start)
    span = now - start
    if count < 5 or span < window / 60.0:
        return 0.0
    return count / span * window


def success_rate(times: deque[float], now: float, window: float) -> float:
    """Successes per window over the last few seconds (a sixth of the window).

    Providers let a slice of the window's budget (1/60: a second of a per-minute limit) through
    at once before pacing, so successes over a span measure the rate over the span plus one
    slice, not the span alone (which made the first cut up to twice the cap)."""
    horizon = window / 6.0
    while times and times[0] < now - horizon:
        times.popleft()
    if len(times) < 5:
        return 0.0  # too few to measure: a cut from this would be a guess
    span = now - times[0] + window / 60.0
    return len(times) / span * window
