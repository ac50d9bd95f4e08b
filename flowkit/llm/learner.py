"""What an endpoint really charges against flowkit's estimates (see ``charging``), learned from
its rate-limit headers: ``ChargeLearner`` measures the fall of ``x-ratelimit-remaining-tokens``
over spans of the requests the endpoint admitted, and the first reply of a first contact;
``replay.Replay`` replays the budget from the requests sent, for an endpoint flowkit overcharges.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from flowkit.llm.replay import LATE, MAX_STEP, Replay

LEARN_AFTER = 4
"""Requests the spans between readings must hold to measure the charge: a span's end is
uncertain by part of a request (one sent as the endpoint wrote a reading may count on either
side), so fewer cannot tell a wrong rule from that."""
SPAN = 64
"""The most requests a span measures over: longer ones are as exact and forget a change slower."""


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

TOKEN_LEARNING = 0.2
"""Weight of each reply's used/estimated tokens in the running correction of the estimates."""


class UsageScale:
    """Used tokens over estimated, from replies' usage: what a request to an endpoint that
    charges by usage is charged at, before its reply settles it."""

    def __init__(self) -> None:
        self.scale = 1.0
        self._samples = 0

    def used(self, used: int, estimated: int) -> None:
        """A plain mean over the first replies (the first one alone sets it: the requests that
        queued behind it are charged right), then a running average."""
        self._samples += 1
        weight = max(TOKEN_LEARNING, 1.0 / self._samples)
        self.scale += weight * (used / estimated - self.scale)


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
        self._events: deque[list[Any]] = deque()  # [time, unscaled, is a send, by rule]
        self._open: dict[int, list[Any]] = {}  # tickets in flight → their send event
        self._tickets = 0
        self._queued: deque[tuple[float, int]] = deque()  # readings not yet in the chain
        # Spans between usable readings: (tokens taken, unscaled tokens estimated, requests).
        self._spans: deque[tuple[float, float, int, dict[str, float]]] = deque()  # and by rule
        # Where the next span starts: (time, left, tokens, requests, tokens by rule).
        self._start: tuple[float, float, float, int, dict[str, float]] | None = None
        self._prev: tuple[float, float, float] | None = None  # (t, left, tokens): last reading
        self._tokens = 0.0  # unscaled tokens the endpoint took by the readings in the chain
        self._by_rule: dict[str, float] = {}  # the same, by each rule (see :meth:`sent`)
        self.rule: str | None = None
        """The rule the spans found the endpoint charges by, when not the one told (None)."""
        self.switches = 0
        """How many times ``rule`` changed: a charge reckoned before a change is not rescaled."""
        self._told = ""  # the rule the requests are charged by
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

    def sent(
        self,
        now: float,
        tokens: float,
        scale: float,
        rules: Mapping[str, int] | None = None,
        rule: str = "",
    ) -> int:
        """A request charged ``tokens`` (reckoned at ``scale``, by ``rule``) was sent at
        ``now``; ``rules``: what it costs unscaled by each rule (``usage``: until the reply says
        what it used, its reservation), so the spans can tell which rule the endpoint charges
        by. Returns its ticket, open until :meth:`refused` or :meth:`ended`."""
        unscaled = tokens / scale if scale else tokens
        self._tickets += 1
        self._told = rule or self._told
        # The replay counts each request by the rule in force (not the one it was reckoned by,
        # for a request queued when the rule changed).
        replayed = (rules or {}).get(self.rule or self._told) or unscaled
        event = [now, unscaled, True, dict(rules) if rules else None, replayed]
        self._events.append(event)
        self._open[self._tickets] = event
        if self._first is None:
            self._first = now
        self.replay.charged(now, replayed)
        return self._tickets

    def refused(self, ticket: int, now: float) -> None:
        """The endpoint refused the request of ``ticket`` (or it failed): it took nothing."""
        event = self._open.pop(ticket, None)
        if event is None:
            return
        self.replay.charged(now, -event[4])
        event[1], event[2], event[3] = 0.0, False, None
        self._advance()

    def used(self, ticket: int, tokens: int) -> None:
        """The reply to the request of ``ticket`` used ``tokens``: its charge by ``usage``."""
        event = self._open.get(ticket)
        if event is not None and event[3] is not None:
            event[3]["usage"] = tokens

    def ended(self, ticket: int) -> None:
        """The request of ``ticket`` was answered (what it was charged stands)."""
        if self._open.pop(ticket, None) is not None:
            self._advance()

    def charged(self, tokens: float, now: float) -> None:
        """``tokens`` more (fewer, if negative) were charged at ``now`` at the scale in force:
        a reply charged by its usage settling its reservation."""
        if tokens:
            unscaled = tokens / self.scale
            self._events.append([now, unscaled, False, None, unscaled])
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
                sent, tokens, send, rules, _ = self._events.popleft()
                self._count(rules)
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
                _, tokens, send, rules, _ = self._events.popleft()
                self._count(rules)
                self._tokens += tokens
                self._sends += send

    def _link(self, now: float, remaining: int, peak: float) -> None:
        """Close the span from the last usable reading to this one, or start afresh where the
        budget may have reached its top since the last reading (``peak`` is the highest it can
        have been); then measure the spans kept."""
        rate, prev, top = self._rate, self._prev, self._top or self._full
        self._prev = (now, remaining, self._tokens)
        here = (now, float(remaining), self._tokens, self._sends, dict(self._by_rule))
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
                self._judge(taken, self._tokens, APART, self._by_rule)
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
        by_rule = {r: here[4][r] - start[4].get(r, 0.0) for r in here[4]}
        taken = start[1] - remaining + rate * (now - start[0])
        spans.append((taken, here[2] - start[2], here[3] - start[3], by_rule))
        while sum(span[2] for span in spans) - spans[0][2] >= SPAN:
            spans.popleft()
        requests = sum(span[2] for span in spans)
        if requests >= LEARN_AFTER:
            rules = {r: sum(span[3].get(r, 0.0) for span in spans) for r in by_rule}
            taken = sum(span[0] for span in spans)
            estimated = sum(span[1] for span in spans)
            if self._judge(taken, estimated, 1.0 + max(CLOSE - 1.0, 2.0 / requests), rules):
                self._spans.clear()  # measured by another rule's estimates: start afresh
                self._start = None

    def _count(self, rules: dict[str, int] | None) -> None:
        """Add a request's charge by each rule to the chain's totals."""
        for rule, tokens in (rules or {}).items():
            self._by_rule[rule] = self._by_rule.get(rule, 0.0) + tokens

    def _judge(
        self, taken: float, estimated: float, apart: float, rules: Mapping[str, float]
    ) -> bool:
        """Scale to ``taken`` over ``estimated`` (unscaled), if ``apart`` from the scale in
        force; or, where another rule's charges (``rules``, unscaled, over the same requests)
        come nearer ``taken`` than the rule in force's by more than ``APART``, charge by that
        rule from now on, at its scale. Whether the rule changed."""
        if estimated <= 0 or taken <= 0:
            return False
        self._proven = True
        bound = MAX_STEP * 2.5  # as far as the replay looks: a misread header is not a rule
        current = self.rule or self._told
        off = {r: abs(math.log(taken / t)) for r, t in rules.items() if t > 0}
        if current in off:
            # Each request's charge by the rule in force, whichever rule it was charged by (a
            # request reckoned before the rule changed is sent after it).
            estimated = rules[current]
        best = min(off, key=off.__getitem__, default=current)
        if best != current and current in off and off[current] - off[best] > math.log(APART):
            # The scale on the wrong rule's estimates is bounded (``MAX_STEP``) and follows
            # the rule's mistakes request by request (a long prompt, a short reply): the rule
            # that fits the spans is charged by instead (told ``usage``, an endpoint that
            # charges on arrival takes 15-20 times a judge's usage).
            self.rule, self.switches = best, self.switches + 1
            self.scale = min(bound, max(1.0 / bound, taken / rules[best]))
            self.replay = Replay()  # what it kept is in the old rule's estimates
            return True
        self._move(min(bound, max(1.0 / bound, taken / estimated)), apart)
        return False

    def _move(self, scale: float, apart: float) -> bool:
        """Charge ``scale`` × the estimates from now on, if it is ``apart`` from the scale in
        force; whether the scale moved."""
        if scale <= 0 or max(scale / self.scale, self.scale / scale) < apart:
            return False  # within the readings' noise of the rule in force: keep it
        self.scale = scale
        return True
