"""The learned stall deadline (`flowkit.llm.stalls`)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from flowkit.llm.stalls import StallWatch


@pytest.mark.skipif(sys.version_info < (3, 11), reason="deadlines move only from Python 3.11")
def test_a_deadline_learned_as_another_attempt_times_out_leaves_that_one_be() -> None:
    """A reply taught a shorter deadline in the loop step after another attempt's timeout had
    fired but before that attempt ran: moving its expiring timeout raised "Cannot change state
    of expiring Timeout" into the reply's own call, and a row that had its answer failed (seen
    under load as 499 of 500 rows scored)."""
    watch = StallWatch(timeout=30.0, floor=0.05)
    for _ in range(259):  # the next reply is the 260th: it sets the deadline from these
        watch._observe(0.01)
    assert watch.deadline is not None
    watch.deadline = None  # as at a run's start: nothing learned yet, attempts get the timeout

    async def answer(value: str, after: float) -> str:
        await asyncio.sleep(after)
        return value

    async def body() -> tuple[BaseException | str, BaseException | str]:
        stalled = asyncio.create_task(watch.run(1.0, lambda: answer("late", 10.0)))
        replied = asyncio.create_task(watch.run(30.0, lambda: answer("ok", 0.5)))
        await asyncio.sleep(0)  # both attempts are in flight
        time.sleep(1.2)  # a busy loop: the reply's wake-up and the timeout fire in one step
        out = await asyncio.gather(stalled, replied, return_exceptions=True)
        return out[0], out[1]

    stalled, replied = asyncio.run(body())
    assert replied == "ok"
    assert isinstance(stalled, TimeoutError)
    assert watch.deadline == 0.05  # learned from the reply, as before
