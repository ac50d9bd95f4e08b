"""Scheduler behaviour with asyncio-level fakes: admission, retries, budgets (pacing by rate
is in test_pacing)."""

from __future__ import annotations

import asyncio
import random
import time

import openai
import pytest

from flowkit.llm.budget import TokenBucket
from flowkit.llm.endpoint import Limits
from flowkit.llm.pacing import HEADER_MARGIN
from flowkit.llm.scheduler import Scheduler
from tests.llm.fakes import FakeClock, Script, connection_error, run, status_error

FAST = {"backoff_base": 0.001, "backoff_max": 0.002}


def make(concurrency: int = 8, **kw: object) -> Scheduler:
    return Scheduler(Limits(concurrency=concurrency, **{**FAST, **kw}))  # type: ignore[arg-type]


def test_in_flight_never_exceeds_the_current_limit() -> None:
    sched = make(16, max_retries=20)
    rng = random.Random(7)
    running = 0
    violations: list[tuple[int, int]] = []
    peak = 0

    async def call() -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running > sched.limit:
            violations.append((running, sched.limit))
        try:
            await asyncio.sleep(rng.random() * 0.003)
            if rng.random() < 0.2:
                raise status_error(429)
            return "ok"
        finally:
            running -= 1

    async def body() -> None:
        results = await asyncio.gather(*(sched.run(call) for _ in range(300)))
        assert len(results) == 300

    run(body)
    assert violations == []
    assert peak <= 16
    assert sched.stats.peak_in_flight <= 16
    assert sched.stats.rate_limited > 0
    assert 1 <= sched.limit <= 16
    assert sched.in_flight == 0


def test_retry_after_seconds_is_honoured() -> None:
    sched = make(4, backoff_base=0.0, backoff_max=0.0)
    script = Script([status_error(429, {"Retry-After": "0.3"})])

    async def body() -> float:
        t0 = time.perf_counter()
        await sched.run(script)
        return time.perf_counter() - t0

    elapsed = run(body)
    assert elapsed >= 0.29  # the header's wait, where the backoff alone is none


def test_retry_after_zero_means_retry_now() -> None:
    # A large backoff makes any fallback to backoff obvious: 0 must not read as "no header".
    sched = Scheduler(Limits(concurrency=4, backoff_base=5.0, backoff_max=5.0))
    script = Script(
        [status_error(429, {"Retry-After": "0"}), status_error(503, {"retry-after": "0"})]
    )

    async def body() -> float:
        t0 = time.perf_counter()
        done = await sched.run(script)
        assert done.attempts == 3
        return time.perf_counter() - t0

    assert run(body) < 4.0  # no 5 s backoff: a margin a loaded machine cannot eat


def test_retry_after_ms_wins_over_retry_after() -> None:
    sched = Scheduler(Limits(concurrency=4, backoff_base=5.0, backoff_max=5.0))
    script = Script([status_error(429, {"retry-after-ms": "150", "Retry-After": "5"})])

    async def body() -> float:
        t0 = time.perf_counter()
        await sched.run(script)
        return time.perf_counter() - t0

    elapsed = run(body)
    assert 0.14 <= elapsed < 4.0  # the 150 ms, not Retry-After's 5 s (nor the 5 s backoff)


@pytest.mark.parametrize("gap", [0.0, 0.05])
def test_a_429_retry_after_pauses_the_whole_endpoint(gap: float) -> None:
    # The second request leaves after the opening's burst: it follows the 429 by more than
    # opening.BURST_GAP, or the burst is the one request there is (concurrency 1).
    sched = make(1 if gap == 0.0 else 4)
    first = Script([status_error(429, {"Retry-After": "0.25"})])
    second = Script([])

    async def body() -> float:
        t0 = asyncio.get_running_loop().time()
        task = asyncio.create_task(sched.run(first))
        while not first.times:  # wait until the first call has had its 429
            await asyncio.sleep(0.001)
        await asyncio.sleep(gap)
        await sched.run(second)
        await task
        return second.times[0] - t0

    assert run(body) >= 0.24


def test_retries_are_bounded_and_the_last_error_is_raised() -> None:
    errors = [status_error(500), connection_error(), status_error(502), status_error(503)]
    sched = make(4, max_retries=3)
    script = Script(list(errors))

    async def body() -> None:
        await sched.run(script)

    with pytest.raises(openai.InternalServerError) as caught:
        run(body)
    assert caught.value is errors[-1]
    assert script.calls == 4
    assert sched.stats.retries == 3
    assert sched.stats.errors == 1
    assert sched.stats.server_errors == 3
    assert sched.stats.connection_errors == 1


@pytest.mark.parametrize("error", [status_error(400), status_error(401), status_error(404)])
def test_non_retryable_errors_raise_at_once(error: openai.APIStatusError) -> None:
    sched = make(4, max_retries=6)
    script = Script([error])

    async def body() -> None:
        await sched.run(script)

    with pytest.raises(type(error)):
        run(body)
    assert script.calls == 1
    assert sched.stats.retries == 0
    assert sched.limit == 4


def test_unknown_exceptions_are_not_retried() -> None:
    sched = make(4)
    script = Script([ValueError("bug in a node")])

    async def body() -> None:
        await sched.run(script)

    with pytest.raises(ValueError, match="bug in a node"):
        run(body)
    assert script.calls == 1


def test_x_should_retry_false_and_huge_retry_after_are_final() -> None:
    sched = make(4)

    async def body(error: Exception) -> None:
        await sched.run(Script([error]))

    with pytest.raises(openai.InternalServerError):
        run(lambda: body(status_error(500, {"x-should-retry": "false"})))
    with pytest.raises(openai.RateLimitError):
        run(lambda: body(status_error(429, {"Retry-After": "86400"})))
    assert sched.stats.retries == 0


def test_each_attempt_is_bounded_by_the_timeout() -> None:
    sched = make(4, max_retries=1, timeout=0.05)
    calls = 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(5)
        return "late"

    async def body() -> None:
        await sched.run(slow)

    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        run(body)
    assert time.perf_counter() - t0 < 4.0  # cut at the timeout, not the call's own 5 s
    assert calls == 2
    assert sched.stats.timeouts == 2


def test_timeout_then_success() -> None:
    sched = make(4, max_retries=2)
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(5)
        return "ok"

    async def body() -> int:
        done = await sched.run(flaky, timeout=0.05)
        return done.attempts

    assert run(body) == 2


def test_backoff_uses_full_jitter_under_the_exponential_ceiling() -> None:
    clock = FakeClock()
    sched = Scheduler(
        Limits(concurrency=2, max_retries=5, backoff_base=0.5, backoff_max=3.0),
        clock=clock,
        sleep=clock.sleep,
        rng=lambda: 1.0,  # the top of each jitter range, so the ceilings are visible
    )

    async def body() -> None:
        await sched.run(Script([status_error(500)] * 5))

    run(body)
    assert clock.sleeps == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_rpm_budget_spaces_requests_evenly() -> None:
    clock = FakeClock()
    sched = Scheduler(Limits(concurrency=4, rpm=60), clock=clock, sleep=clock.sleep)
    starts: list[float] = []

    async def call() -> str:
        starts.append(clock.now)
        return "ok"

    async def body() -> None:
        for _ in range(5):
            await sched.run(call)

    run(body)
    step = 1.0 / HEADER_MARGIN  # a known limit is paced at 97% of itself
    assert starts == pytest.approx([0.0, step, 2 * step, 3 * step, 4 * step])


def test_rpm_budget_with_concurrent_callers_in_real_time() -> None:
    # 60 requests per 0.5 s window = one every ~8.3 ms, burst of one.
    t0 = time.monotonic()  # the pace's schedule starts no earlier than this
    sched = Scheduler(Limits(concurrency=32, rpm=60), window=0.5)
    script = Script([])

    async def body() -> None:
        await asyncio.gather(*(sched.run(script) for _ in range(13)))

    run(body)
    # Starts follow an absolute schedule from the budget's first take, so the k-th start is
    # never earlier than k intervals after it. Measured from before the scheduler existed, not
    # from the first start: on a loaded machine the first request may be woken late while the
    # schedule behind it keeps its times (the loop saw it, 1 run in 20).
    offsets = sorted(t - t0 for t in script.times)
    assert all(offset >= k / 120 - 0.002 for k, offset in enumerate(offsets)), offsets


def test_tpm_budget_charges_the_estimate_and_corrects_from_usage() -> None:
    clock = FakeClock()
    sched = Scheduler(Limits(concurrency=4, tpm=6000), clock=clock, sleep=clock.sleep)

    async def body() -> None:
        # capacity 100 tokens, 100 tokens/s; estimates of 100 but only 10 really used.
        for _ in range(5):
            await sched.run(Script([]), tokens=100, used_tokens=lambda _: 10)

    run(body)
    # The first call spends the burst; the refunds mean later calls wait ~0.9 s, not 1 s.
    assert sum(clock.sleeps) < 4 * 0.95
    assert sched.stats.tokens == 50


def test_token_bucket_debt_keeps_the_long_run_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(600, window=60, clock=clock, sleep=clock.sleep)  # 10/s, burst 10
    assert bucket.reserve(30) == 0.0  # a full bucket admits an oversized request...
    assert bucket.reserve(10) == pytest.approx(3.0)  # ...and the next one pays its debt
    bucket.adjust(-20)  # refund: the first used only 10
    assert bucket.level == pytest.approx(-10.0)


def test_a_pause_or_a_lower_count_from_the_server_moves_turns_already_queued() -> None:
    async def body() -> list[float]:
        bucket = TokenBucket(600, window=6.0)  # 100/s, burst 10
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for _ in range(10):
            await bucket.acquire(1)  # the burst is spent: the next turns are 10 ms apart
        queued = [asyncio.create_task(bucket.acquire(1)) for _ in range(3)]
        await asyncio.sleep(0)  # all three have reserved their turn
        bucket.hold_until(time.monotonic() + 0.2)  # a 429 asked for a 200 ms pause
        await asyncio.gather(*queued)
        return [loop.time() - t0]

    # Without the move they would have gone at 10, 20 and 30 ms, inside the pause.
    assert run(body)[0] >= 0.2


def test_the_token_estimate_is_corrected_by_usage_from_the_first_reply() -> None:
    sched = make(4, tpm=60_000)

    async def body() -> None:
        await sched.run(Script([], value="r"), tokens=300, used_tokens=lambda _: 100)

    run(body)
    # The requests queued behind that reply are charged 100, not 300: their waits are fixed
    # when they queue, so a refund after their replies could not give the time back.
    assert sched._usage.scale == pytest.approx(1 / 3)


def test_cancelled_callers_release_their_slot() -> None:
    sched = make(1)

    async def body() -> None:
        blocker = asyncio.create_task(sched.run(lambda: asyncio.sleep(10)))
        waiter = asyncio.create_task(sched.run(Script([])))
        await asyncio.sleep(0.01)
        assert sched.in_flight == 1
        waiter.cancel()
        blocker.cancel()
        await asyncio.gather(blocker, waiter, return_exceptions=True)
        assert sched.in_flight == 0
        assert (await sched.run(Script([]))).value == "ok"

    run(body)


def test_one_scheduler_survives_several_event_loops() -> None:
    sched = make(2, max_retries=1)

    async def body() -> None:
        await asyncio.gather(*(sched.run(Script([status_error(429)])) for _ in range(4)))

    run(body)
    limit = sched.limit
    run(body)
    assert sched.in_flight == 0
    assert sched.limit <= limit
    assert sched.stats.calls == 8
    assert sched.reset_stats().calls == 8
    assert sched.stats.calls == 0
    assert sched.limit <= limit  # the learned limit survives a stats reset
