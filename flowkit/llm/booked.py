"""What an endpoint's token pace has booked for requests not yet answered, and how a reading of
``x-ratelimit-remaining-tokens`` re-syncs the pace from it.

An estimate that is too high (a rule told wrong, a prompt counted long) keeps a run paced by its
estimates under the endpoint's limit, and the endpoint's budget refills to its top between
replies, where no reading can measure the charge (see ``learner``). The reading itself says how
much may go: what the endpoint reported left, less everything booked for requests it may not
have charged yet. Levelled up to that at each reply, the pace loses to an over-estimate only the
requests booked between two replies (benchmarks/RESULTS.md, Pacing, round 5).
"""

from __future__ import annotations

from collections.abc import Mapping

from flowkit.llm.budget import TokenBucket

Rules = Mapping[str, int] | None
"""What a request costs by each ``token_charge`` rule, unscaled (see ``learner``), if known."""

BOOKED_AHEAD = 1.0
"""Seconds of the token pace requests may book ahead of time before more wait to be charged."""


class Booked:
    """Tokens booked on a token pace (hedges and top-ups included) for requests queued for
    their turn or in flight, by ticket once sent."""

    def __init__(self) -> None:
        self._by_ticket: dict[int, int] = {}
        self.outstanding = 0
        """Booked for requests not yet answered (queued ones included)."""

    def book(self, bucket: TokenBucket | None, tokens: int) -> int:
        """Count ``tokens`` about to be booked on ``bucket`` (none: nothing is booked)."""
        if bucket is None:
            return 0
        self.outstanding += tokens
        return tokens

    def dropped(self, tokens: int) -> None:
        """A request that booked ``tokens`` left before it was sent (cancelled)."""
        self.outstanding -= tokens

    def sent(self, ticket: int, tokens: int) -> None:
        """The request that booked ``tokens`` was sent as ``ticket``."""
        self._by_ticket[ticket] = tokens

    def done(self, ticket: int) -> None:
        """The request of ``ticket`` was answered, refused or given up (idempotent)."""
        self.outstanding -= self._by_ticket.pop(ticket, 0)

    def resync(self, bucket: TokenBucket, remaining: int) -> None:
        """Level ``bucket`` up to what the endpoint reported left, less everything booked for
        requests not yet answered: sent after the endpoint wrote the reading, or charged by
        usage and still to be charged their completion (those it has charged already count
        twice, which errs on the safe side)."""
        bucket.raise_to(remaining - self.outstanding)
