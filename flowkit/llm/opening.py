"""The first requests to an endpoint whose limits are unknown, spread a little in time.

An endpoint with no known pace opens at its full ``concurrency`` (``pacing``): most endpoints
either announce their limits or have none, and an unlimited one should not wait for a ramp.
Sent all in the same instant, though, an opening of 32 against a budget whose one-second slice
holds four loses 28 to 429s before the first refusal can say so (benchmarks/RESULTS.md,
Pacing, round 5). Sent ``SPREAD`` apart until the endpoint first answers, the opening still
has every request in flight within a fraction of a round trip, and a refusal (which an
endpoint sends at once) comes back while most of the opening has not left: the cut it causes
holds the rest.
"""

from __future__ import annotations

from flowkit.llm.budget import Clock, Sleep

SPREAD = 0.001
"""Seconds between two requests of an opening, until the endpoint first answers: 32 go out
within 31 ms (about what a loaded client takes to send them anyway), against a 200 ms reply;
a local refusal comes back within a few turns."""


class Spread:
    """Turns ``SPREAD`` apart for an opening's requests until the endpoint has answered."""

    def __init__(self, clock: Clock, sleep: Sleep) -> None:
        self._clock, self._sleep = clock, sleep
        self._next = 0.0
        self.heard = False
        """Whether the endpoint answered (anything): the opening's timing is its own then."""

    async def turn(self) -> None:
        """Wait for this request's turn in the opening."""
        if self.heard:
            return
        now = self._clock()
        due = max(now, self._next)
        self._next = due + SPREAD
        if due > now:
            await self._sleep(due - now)
