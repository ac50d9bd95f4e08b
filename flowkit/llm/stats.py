"""What a scheduler hands back and counts: a call's value with its attempts, and the counters a
run summary reads (requests, retries, 429s, stalls, tokens, the peak in flight)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

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
    charged_tokens: int = 0
    """Tokens charged to the token pace for successful calls, as the endpoint counts them (see
    ``charging``): on arrival, or by usage."""
    peak_in_flight: int = 0
    """Most attempts in flight at once."""
