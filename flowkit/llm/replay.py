"""The endpoint's token budget replayed from the requests sent: what the learner (``learner``)
uses to find how much an endpoint flowkit overcharges really takes, where its budget refills to
the top between replies and no fall between two readings measures a charge.
"""

from __future__ import annotations

from collections import deque

MAX_STEP = 4.0
"""A quarter of the most the scale may be (or a quarter of its inverse, the least): farther from
the estimates than that, a header is misread, not a rule."""
AGREE = 3
"""Readings whose replayed scales must agree before the scale is set to them in one step."""
AGREEMENT = 1.25
"""How far apart (the largest over the smallest) the scales of readings that agree may be."""
LATE = 0.02
"""Seconds a reading may be read after the endpoint wrote it (the reply's travel, the client's
parsing on a busy machine): the replay's refill over it must be small beside a charge."""
KEPT = 256
"""Requests the replay keeps (their send times and estimates): enough for a second's budget."""


class Replay:
    """The endpoint's token budget replayed from the pacer's unscaled estimates.

    A reply's ``x-ratelimit-remaining-tokens`` is the endpoint's budget as it stood: its top
    (the most ever seen left) less what the requests of the last moments were charged, plus the
    refill since. Replaying the requests sent (at their send times, refilling at the limit's pace,
    refusing what would not fit, as the endpoint does) with each estimate multiplied by a scale
    gives the budget the endpoint would report if it charged that scale; the scale that gives
    the reported figure is what the endpoint charges against the estimates. Unlike the fall
    between two readings (``ChargeLearner``), this needs no span in which the budget neither
    filled nor ran dry: an endpoint charged less than flowkit thinks keeps its budget near the
    top, and each reading that finds it a little below says by how much. When ``AGREE``
    readings in a row agree, the scale is set to theirs in one step.
    """

    def __init__(self) -> None:
        self._sends: deque[tuple[float, float]] = deque(maxlen=KEPT)
        self._found: list[float] = []

    def charged(self, now: float, estimate: float) -> None:
        """``estimate`` tokens (unscaled) were charged at ``now``; a negative one was given back
        (a refused request, a reply shorter than reserved)."""
        if estimate:
            self._sends.append((now, estimate))

    def _left(self, scale: float, now: float, top: float, rate: float) -> float:
        """What the endpoint would report left at ``now`` if it charged ``scale`` × estimates."""
        level, stamp = top, None
        for sent, estimate in self._sends:
            if sent > now:
                break
            if stamp is not None:
                level = min(top, level + (sent - stamp) * rate)
            stamp = sent
            charge = scale * estimate
            if charge < 0 or level >= min(charge, top):  # what would not fit is refused
                level = min(top, level - charge)
        if stamp is not None:
            level = min(top, level + (now - stamp) * rate)
        return level

    def reading(self, now: float, remaining: int, top: float, rate: float) -> float | None:
        """The scale ``AGREE`` readings agree on, once the last of them comes; else None."""
        sends = self._sends
        if not sends or rate <= 0 or top <= 0:
            return None
        # The replay starts at the top: only when the kept requests go back far enough for an
        # empty budget to have filled up since (or back to the first request).
        if len(sends) == KEPT and now - sends[0][0] < 2 * top / rate:
            return None
        each = sum(max(0.0, e) for _, e in sends) / len(sends)
        if rate * LATE > 0.1 * each:
            return None  # the refill over the replies' timing would drown a request's charge
        lo, hi = 1.0 / (MAX_STEP * 2.5), MAX_STEP * 2.5
        # A reading at the top or at empty bounds the scale but does not measure it; one
        # within a fraction of a request of either edge drowns in the replies' timing.
        if not 0.1 * each < remaining < top - 0.1 * each:
            return None
        if not self._left(hi, now, top, rate) < remaining < self._left(lo, now, top, rate):
            return None
        for _ in range(24):
            mid = (lo * hi) ** 0.5
            if self._left(mid, now, top, rate) > remaining:
                lo = mid
            else:
                hi = mid
        found = self._found
        found.append((lo * hi) ** 0.5)
        del found[:-AGREE]
        if len(found) < AGREE or max(found) > AGREEMENT * min(found):
            return None
        agreed = sorted(found)[AGREE // 2]
        found.clear()
        return agreed
