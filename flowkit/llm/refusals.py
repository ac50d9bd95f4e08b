"""Which 429s say an endpoint is over its limit, and which are refusals scattered over its replies.

A 429 is the only sign of a limit an endpoint without rate-limit headers gives, but not every 429
is one: an overloaded backend behind a balancer, or a provider shedding load, refuses a share of
requests whatever the pace, often with the same ``Retry-After`` a limiter sends. Slowing down for
those costs everything (a whole endpoint held for a second at every tenth reply) and helps
nothing. So:

- **Headers decide where they say what is left**: a budget spent (or less left than the request
  costs) is overload; a 429 while they show room is a refusal of that request alone.
- **Without them, a 429 asking for a pause** is taken as overload, and the opening's first cut
  is put on trial: the share of 429s among replies to requests sent after it is compared with
  the opening's. Fallen: the cut helped, it was a limit. Not fallen: the full window is opened
  again for a while; if the share then rises with the rate, it was a limit after all (the cut
  is restored), and if it stays, the 429s are **scattered**: from then on they hold only the
  refused request, for its ``Retry-After``. Should 429s later come far more often (a limiter
  behind them), it is a limit after all, and only 429s far over the scattered share cut its pace.
- **A first overload after many successes** (``LATE``) is a limiter's allowance spent: its cut
  stands untried (too few 429s came yet for a trial to tell, and a reopening would spend the
  limit's budget again).
- **429s that cluster** (most of the recent replies) are overload whatever they say.

The whole endpoint is held for a ``Retry-After`` only where the quota is shown shared and spent:
headers say so, the 429s cluster, or most recent replies were 429s.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from flowkit.llm.ratelimits import RateHeaders
from flowkit.llm.retry import Verdict

CLUSTER = (12, 20)
"""A 429 is overload whatever it says when at least 12 of the last 20 replies were 429s:
scattered 429s at a 15% rate reach that about once in a million windows, an endpoint over its
limit does all the time."""
HOLD_SHARE = 0.5
"""A pause asked without headers holds the whole endpoint when at least this share of the recent
replies were 429s (an opening refused past its allowance); below it, only the refused request."""
TRIAL_REPLIES = (20, 40)
"""Replies after the cut (and again after reopening) before the trial judges, and at most."""
SIGNIFICANCE = 0.01
"""How unlikely by chance a change in the share of 429s must be for the trial to believe it."""
FAR_OVER = 0.0001
"""How unlikely by chance the recent share of 429s must be, against the share found scattered
(checked at every 429, so many times a run), to be taken for a limit after all."""
TRIALS = 3
"""Cuts put on trial in a run, at most (a trial that saw no 429 at the full window starts over)."""
BACKGROUND = 100
"""Replies the share of scattered 429s is measured over before a rise above it is believed."""
STORM = 0.8
"""The share of 429s since they were found scattered that shows a limit before that share is
measured over enough replies."""
LIKELY = 0.1
"""A fall in the share this unlikely by chance, not yet significant, is looked at again."""
LATE = 50
"""Successes before the first overload after which its cut is not tried: scattered 429s at 10%
show within 50 requests in 99.5% of runs, while a limiter whose allowance holds this many is
refused only once it is spent, with too few 429s yet for the trial to tell."""


class Step(Enum):
    """What the trial of the opening's cut asks of the pacer."""

    REOPEN = "reopen"
    """The cut did not lower the share of 429s: open the full window again, and watch."""
    RESTORE = "restore"
    """The share rose with the rate: it is a limit; pace as the cut had."""


@dataclass(frozen=True)
class Reading:
    """What one 429 says."""

    overload: bool
    """The endpoint is over its limit (the pace may be cut)."""
    clustered: bool
    """Most recent replies were 429s."""
    hold: bool
    """Its ``Retry-After`` holds the whole endpoint, not only the refused request."""


def spent(rates: RateHeaders | None, charge: int) -> bool | None:
    """Whether a 429's headers say a budget is spent (or has less left than the request's
    ``charge``); None when they say nothing about what is left."""
    if rates is None or (rates.requests.remaining is None and rates.tokens.remaining is None):
        return None
    tokens = rates.tokens.remaining
    return rates.exhausted or (tokens is not None and charge > 0 and tokens < charge)


def more_often(first: tuple[int, int], second: tuple[int, int]) -> float:
    """How likely chance alone puts at least as many of the 429s in ``first`` as it has, each
    a (replies, 429s) tally: Fisher's exact test, one-sided (both tallies are samples)."""
    (n1, k1), (n2, k2) = first, second
    total, refused = n1 + n2, k1 + k2
    ways = math.comb(total, refused)
    top = min(n1, refused)
    return sum(math.comb(n1, i) * math.comb(n2, refused - i) for i in range(k1, top + 1)) / ways


class Refusals:
    """The recent replies of one endpoint, and the trial of its opening's cut.

    The trial compares cohorts of requests by when they were *sent* (the opening's, those sent
    after the cut, those sent after a reopening), each judged once its first requests are all
    answered: by arrival, a 429 (refused at once) would count long before the successes sent
    with it."""

    def __init__(self) -> None:
        self._recent: deque[bool] = deque(maxlen=CLUSTER[1])  # was each reply a 429?
        self._background = (0, 0)  # [replies, 429s] since they were found scattered
        self._trials = 0
        self._phase = 0  # 0: the opening; 1: after its cut; 2: reopened; 3: judged
        self._sent = [0, 0, 0, 0]
        self._opening = [0, 0]  # the opening's [replies, 429s]
        # After the cut, and after reopening: was the n-th request sent a 429 (None: no reply)?
        self._outcomes: dict[int, list[bool | None]] = {}
        self._start(again=False)
        self.scattered = False
        """This endpoint's 429s were shown not to fall with its pace: each holds one request."""

    def sent(self, opening: bool = False) -> tuple[int, int]:
        """A request leaves (``opening``: one of the opening's burst, even after its cut): its
        mark (phase, place in it) for :meth:`reply`."""
        phase = 0 if opening else self._phase
        self._sent[phase] += 1
        return phase, self._sent[phase] - 1

    def read(self, verdict: Verdict, charge: int) -> Reading:
        """What a 429 (``verdict``) for a request charged ``charge`` tokens says; recorded by
        :meth:`reply` first."""
        over = self._over_background()
        if self.scattered and over:
            self.scattered = False  # 429s far more often than the trial saw: a limit after all
        # A limit found over scattered 429s: those go on at their share, and only 429s far
        # over it say the pace is too high (each scattered one cutting it, it falls to nothing).
        beneath = not self.scattered and self._background[0] >= BACKGROUND and not over
        # Scattered 429s at the share the trial saw may cluster by chance: only far more counts.
        # While reopened, the trial judges.
        clustered = not self.scattered and self._phase != 2 and sum(self._recent) >= CLUSTER[0]
        told = spent(verdict.rates, charge)
        if told is None:
            asked = bool(verdict.retry_after) and not self.scattered and not beneath
            overload = asked and self._phase != 2  # reopened: the trial watches
            crowded = sum(self._recent) >= HOLD_SHARE * len(self._recent)
            return Reading(overload or clustered, clustered, asked and (crowded or clustered))
        return Reading(told or clustered, clustered, told or clustered)

    def cut(self) -> None:
        """The opening overshot on 429s without headers: judge the cut by what is sent next."""
        if self._phase == 0 and not self.scattered:
            if self._opening[0] - self._opening[1] >= LATE:
                self._phase = 3  # an allowance spent: a limit, as 429s were taken before
                return
            self._phase, self._trials = 1, self._trials + 1

    def reply(self, mark: tuple[int, int], refused: bool) -> Step | None:
        """Record the reply to a request marked ``mark``; what the trial asks, if it just
        decided something."""
        self._recent.append(refused)
        if self.scattered:  # the share they come at, measured over the whole run since
            self._background = (self._background[0] + 1, self._background[1] + refused)
        phase, place = mark
        if phase == 0:
            self._opening[0] += 1
            self._opening[1] += refused
            return None
        if phase == 3 or place >= TRIAL_REPLIES[1]:
            return None
        self._outcomes[phase][place] = refused
        if phase != self._phase:
            return None
        for n in TRIAL_REPLIES:  # judged once the first 20 (40) sent are all answered
            first = self._outcomes[phase][:n]
            if place < n and None not in first:
                now = (n, sum(map(bool, first)))
                if phase == 1:
                    return self._judge_cut((self._opening[0], self._opening[1]), now)
                # Against all sent before reopening: the cut's requests, and the opening's
                # (which a limiter's allowance let more of through than it lets now).
                paced = [o for o in self._outcomes[1] if o is not None]
                before = (self._opening[0] + len(paced), self._opening[1] + sum(paced))
                return self._judge_reopening(before, now)
        return None

    def _judge_cut(self, before: tuple[int, int], after: tuple[int, int]) -> Step | None:
        n = after[0]
        fell, rose = more_often(before, after), more_often(after, before)
        last = n >= TRIAL_REPLIES[1]
        if min(fell, rose) < SIGNIFICANCE:
            # Fallen with the pace, or risen though it fell (the opening drew on a limiter's
            # allowance, or the pace measured counted it): a limit.
            self._phase = 3
            return None
        if not last and fell < LIKELY:
            return None  # likely fallen: look again at 40
        self._phase = 2  # a pace that changed nothing
        return Step.REOPEN

    def _judge_reopening(self, before: tuple[int, int], opened: tuple[int, int]) -> Step | None:
        n, k = opened
        if more_often(opened, before) < SIGNIFICANCE:
            self._phase = 3
            return Step.RESTORE  # risen with the rate: a limit
        last = n >= TRIAL_REPLIES[1]
        if k == 0:  # no 429 at the full window: rare ones, or a limiter's allowance not spent
            if last:
                self._start(again=True)  # the next overload puts its cut on trial again
            return None
        if k <= n * (before[1] / max(1, before[0]) + 0.05) or last:
            self._phase, self.scattered = 3, True
            return Step.REOPEN  # whatever paced it meanwhile goes too
        return None

    def _start(self, *, again: bool) -> None:
        """Count from a new opening (up to ``TRIALS`` times; then 429s are taken as a limit's)."""
        self._phase = 0 if not again or self._trials < TRIALS else 3
        self._sent = [0, 0, 0, 0]
        self._opening = [0, 0]
        self._outcomes = {p: [None] * TRIAL_REPLIES[1] for p in (1, 2)}

    def _over_background(self) -> bool:
        """Whether 429s come far more often than when they were found scattered: a limiter
        whose allowance outlasted the trial refuses nearly every request once it is spent.
        Judged over many replies (a burst's 429s come back before its successes): most of
        those since, or the recent ones far over the share since."""
        since = self._background
        if since[0] < BACKGROUND:
            return False
        recent = (len(self._recent), sum(self._recent))
        storm = since[1] >= STORM * since[0]
        return storm or (recent[1] >= CLUSTER[0] and more_often(recent, since) < FAR_OVER)
