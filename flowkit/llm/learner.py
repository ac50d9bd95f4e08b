"""What an endpoint really charges against flowkit's estimates (see ``charging``), learned from
its rate-limit headers: ``ChargeLearner`` measures the fall of ``x-ratelimit-remaining-tokens``
over spans of the requests the endpoint admitted, and the first reply of a first contact;
``Replay`` replays the budget from the requests sent, for an endpoint flowkit overcharges.
"""

from __future__ import annotations

from collections import deque
from typing import Any

LEARN_AFTER = 4
"""Requests the spans between readings must hold to measure the charge: a span's end is
uncertain by part of a request (one sent as the endpoint wrote a reading may count on either
side), so fewer cannot tell a wrong rule from that."""
SPAN = 64
"""The most requests a span measures over: longer ones are as exact and forget a change slower."""
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


HEDGE = 2.0
"""What a request's charge is booked at (over itself) on the pace from the first rate-limit
headers until the spans have measured the charge (or ``2 * LEARN_AFTER`` requests were
answered): the burst the first reply's headers allow goes out before any span can say whether
the rule is right, and a rule told wrong charges up to about twice the estimates (max_of told,
prompt_plus_max charged); traced, half of that burst was refused."""

APART = 1.3
"""How far (as a factor) a measurement must be from the scale in force to replace it, from one
request's charge or a short span: rules differ by more (prompt_plus_max charges a judge's
request about 1.8 times max_of); readings within it are noise, and following them swung the
pace of a rule declared right."""
CLOSE = 1.08
"""The least factor a long span (over ``SPAN`` requests) must find the scale off by to move it;
between ``LEARN_AFTER`` and ``SPAN`` requests the factor needed falls as 1 + 2 / requests."""


class ChargeLearner:
    """How the endpoint's real charge compares with the pacer's, learned from the fall of
    ``x-ratelimit-remaining-tokens`` between replies.

    Between two readings ``a`` and ``b`` the endpoint took ``r_a - r_b + refill`` tokens for
    the requests that *arrived* in between and that it admitted; the pacer knows each request's
    unscaled estimate, when it was sent, and whether the endpoint refused it (a 429 takes
    nothing). A span is measured only once every request sent before its end has been answered
    (so a refusal still in flight is not counted as a charge), and over a chain of readings in
    which the budget cannot have reached its top (what refills beyond the top is lost): then a
    request sent just as the endpoint wrote a reading, which the client may count on the wrong
    side of it, moves from one span to the next and the chain's total is unchanged. ``scale``
    (what the scheduler multiplies its estimates by) is set to the chain's measure when it is
    far enough from the scale in force (``APART``, narrowing to ``CLOSE`` as the chain
    lengthens), up or down.

    The first reply of a first contact measures its one request: the budget was whole when it
    arrived (the top is known from what is left and the reset), so the reading's shortfall from
    the top, plus the refill since, is that request's charge, and the requests queued behind it
    are charged right from the start. ``Replay`` learns an endpoint flowkit overcharges, whose
    budget refills to the top between replies so that no span measures anything.
    """

    def __init__(self) -> None:
        self.scale = 1.0
        self._proven = False  # whether spans measured the charge (or enough requests passed)
        self._events: deque[list[Any]] = deque()  # [time, unscaled tokens, is a send]
        self._open: dict[int, list[Any]] = {}  # tickets in flight → their send event
        self._tickets = 0
        self._queued: deque[tuple[float, int]] = deque()  # readings not yet in the chain
        # Spans between usable readings: (tokens taken, unscaled tokens estimated, requests).
        self._spans: deque[tuple[float, float, int]] = deque()
        self._start: tuple[float, float, float, int] | None = None  # where the next span starts
        self._prev: tuple[float, float, float] | None = None  # (t, left, tokens): last reading
        self._tokens = 0.0  # unscaled tokens the endpoint took by the readings in the chain
        self._sends = 0  # requests it admitted by then
        self._first: float | None = None  # when the first request was sent
        self._rate = 0.0  # the budget's refill, tokens a second
        self._full = 0  # the most ever left: the budget's top is at least this
        self._whole = False  # whether a reading showed the budget whole (so _full is its top)
        self._readings = 0
        self._top = 0.0  # the budget's top, from what is left and the reset
        self.replay = Replay()
        """The endpoint's budget replayed from the unscaled estimates (see ``Replay``)."""

    @property
    def hedge(self) -> float:
        """What to book a charge at, over itself: ``HEDGE`` from the first reading until the
        spans have measured the charge, else 1."""
        return HEDGE if self._readings and not self._proven else 1.0

    # -- what the pacer tells it ---------------------------------------------------------

    def sent(self, now: float, tokens: float, scale: float) -> int:
        """A request charged ``tokens`` (reckoned at ``scale``) was sent at ``now``; returns
        its ticket, open until :meth:`refused` or :meth:`ended`."""
        unscaled = tokens / scale if scale else tokens
        self._tickets += 1
        event = [now, unscaled, True]
        self._events.append(event)
        self._open[self._tickets] = event
        if self._first is None:
            self._first = now
        self.replay.charged(now, unscaled)
        return self._tickets

    def refused(self, ticket: int, now: float) -> None:
        """The endpoint refused the request of ``ticket`` (or it failed): it took nothing."""
        event = self._open.pop(ticket, None)
        if event is None:
            return
        self.replay.charged(now, -event[1])
        event[1], event[2] = 0.0, False
        self._advance()

    def ended(self, ticket: int) -> None:
        """The request of ``ticket`` was answered (what it was charged stands)."""
        if self._open.pop(ticket, None) is not None:
            self._advance()

    def charged(self, tokens: float, now: float) -> None:
        """``tokens`` more (fewer, if negative) were charged at ``now`` at the scale in force:
        a reply charged by its usage settling its reservation."""
        if tokens:
            unscaled = tokens / self.scale
            self._events.append([now, unscaled, False])
            self.replay.charged(now, unscaled)

    def reading(
        self,
        now: float,
        remaining: int,
        limit: int,
        reset: float | None,
        window: float,
    ) -> None:
        """A reply said ``remaining`` of ``limit`` tokens per ``window`` are left (full again
        in ``reset`` seconds, when it says)."""
        self._rate = limit / window
        if remaining > self._full:
            self._full, self._whole = remaining, False
        # The top exactly: what is left plus what refills until the reset, where the endpoint
        # says when; else the most seen left, once a reading that says the budget is whole or a
        # second one shows it.
        if reset is not None:
            self._top = max(self._top, remaining + reset * self._rate)
        self._whole |= remaining == self._full and self._readings > 0
        self._readings += 1
        top = self._top or (self._full if self._whole else 0.0)
        if top and remaining > 0:
            agreed = self.replay.reading(now, remaining, top, self._rate)
            if agreed is not None and agreed < self.scale:
                # Several readings agree that the endpoint charges less than the estimates.
                # Only less: a reply read late and a request sent late (a busy client) both
                # make the replay see more refill than the endpoint had, so it finds too high a
                # scale, never too low; so a lower one is taken when it is off by a little
                # more than the readings' noise (the first reply's measure, for one, errs high
                # by the refill over the first request's connection).
                self._move(agreed, CLOSE)
        self._queued.append((now, remaining))
        self._advance()

    # -- the spans -----------------------------------------------------------------------

    def _advance(self) -> None:
        """Put in the chain the readings every request sent before has been answered for."""
        opened = min((event[0] for event in self._open.values()), default=float("inf"))
        rate = self._rate
        while self._queued and self._queued[0][0] < opened:
            now, remaining = self._queued.popleft()
            # The highest the budget can have been since the last reading: what was left then,
            # refilled, less the requests' charges at half their estimates (the least a rule
            # told wrong is found to charge), each as it was sent.
            stamp, level = self._prev[:2] if self._prev else (now, 0.0)
            peak = level
            while self._events and self._events[0][0] <= now:
                sent, tokens, send = self._events.popleft()
                level += rate * max(0.0, sent - stamp)
                peak, stamp = max(peak, level), max(stamp, sent)
                level -= tokens * self.scale * (0.5 if tokens > 0 else 1.0)
                self._tokens += tokens
                self._sends += send
            self._proven |= self._sends >= 2 * LEARN_AFTER
            peak = max(peak, level + rate * max(0.0, now - stamp))
            self._link(now, remaining, peak)
        if not self._readings:
            # No headers (yet): the answered requests go into the totals now, so an endpoint
            # that sends none keeps no list of every request it was sent (where readings come,
            # each span's requests stay listed until its reading, for the budget's peak).
            while self._events and self._events[0][0] < opened:
                _, tokens, send = self._events.popleft()
                self._tokens += tokens
                self._sends += send

    def _link(self, now: float, remaining: int, peak: float) -> None:
        """Close the span from the last usable reading to this one, or start afresh where the
        budget may have reached its top since the last reading (``peak`` is the highest it can
        have been); then measure the spans kept."""
        rate, prev, top = self._rate, self._prev, self._top or self._full
        self._prev = (now, remaining, self._tokens)
        here = (now, float(remaining), self._tokens, self._sends)
        if prev is None:
            # Below the top by more than the reset's rounding (to a millisecond), the level
            # cannot have reached it since the one charge.
            below = remaining + 1 + rate * 0.002 < self._top
            # Only where the refill since the request was sent is under a quarter of what the
            # reading lacks of the top: the request reaches the endpoint later than it is sent
            # (its connection is made first) and that time's refill counts as a charge, so
            # the error stays within what APART lets pass; traced under load, a 545-token
            # charge read as 630 to 1,300 where the refill was about its size.
            short = 4 * rate * (now - (self._first or now)) < self._top - remaining
            if self._sends == 1 and self._first is not None and below and short:
                # The first request alone, into a whole budget (a first contact): its reply
                # measures its charge, so the requests queued behind it are charged right.
                # (Not kept with the spans: the first request's connection makes it arrive
                # later than it was sent, which the refill over it counts as a charge.)
                taken = self._top - remaining + rate * (now - self._first)
                self._judge(taken, self._tokens, APART)
            if self._sends == 1 and remaining > 0:
                # Nothing else was sent until this reply was read: no request can fall on the
                # wrong side of it, so the first span (the burst its headers allowed) starts here.
                self._start = here
            return
        # At the top, refill is lost and the span measures less: a span may lose a twentieth of
        # its requests' estimates (the replies' travel makes the peak uncertain by as much).
        lost = peak + rate * LATE - top
        estimated = (self._tokens - prev[2]) * self.scale
        most = prev[1] - remaining + rate * (now - prev[0])
        if estimated > 0 and most < estimated:
            # Even counting every token that could have refilled, the endpoint took less than
            # the estimates at the scale in force: it does not charge more, so no hedge. (Not
            # a scale to charge at: a request sent as the reply was on its way counts in the
            # estimates but not in what the endpoint had taken, so the bound reads low.)
            self._proven = True
        if lost > 0.05 * estimated:
            # Nor does the next span start here: a reading after a quiet spell has no request
            # sent while it was on its way, which the end of a span has as often as not.
            self._start = None
            return
        start = self._start
        if remaining <= 0:
            return  # at empty (or in debt the header does not show): not an end; go on
        self._start = here
        if start is None:
            return
        spans = self._spans
        spans.append(
            (start[1] - remaining + rate * (now - start[0]), here[2] - start[2], here[3] - start[3])
        )
        while sum(n for _, _, n in spans) - spans[0][2] >= SPAN:
            spans.popleft()
        requests = sum(n for _, _, n in spans)
        if requests >= LEARN_AFTER:
            taken = sum(t for t, _, _ in spans)
            estimated = sum(e for _, e, _ in spans)
            self._judge(taken, estimated, 1.0 + max(CLOSE - 1.0, 2.0 / requests))

    def _judge(self, taken: float, estimated: float, apart: float) -> None:
        """Scale to ``taken`` over ``estimated`` (unscaled), if ``apart`` from the scale in
        force."""
        if estimated <= 0 or taken <= 0:
            return
        self._proven = True
        bound = MAX_STEP * 2.5  # as far as the replay looks: a misread header is not a rule
        self._move(min(bound, max(1.0 / bound, taken / estimated)), apart)

    def _move(self, scale: float, apart: float) -> bool:
        """Charge ``scale`` × the estimates from now on, if it is ``apart`` from the scale in
        force; whether the scale moved."""
        if scale <= 0 or max(scale / self.scale, self.scale / scale) < apart:
            return False  # within the readings' noise of the rule in force: keep it
        self.scale = scale
        return True


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
