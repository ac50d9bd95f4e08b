"""Fakes at the asyncio level: real openai exception objects, no HTTP."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

try:  # the SDK's httpx: httpx2 from openai 3, httpx before
    import httpx2
except ImportError:
    import httpx as httpx2  # type: ignore[no-redef]
import openai

_CLASSES: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    404: openai.NotFoundError,
    429: openai.RateLimitError,
}


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    """The exception the SDK raises for an HTTP error response with these headers."""
    request = httpx2.Request("POST", "http://fake.invalid/v1/chat/completions")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    fallback = openai.InternalServerError if status >= 500 else openai.APIStatusError
    cls = _CLASSES.get(status, fallback)
    return cls(f"fake status {status}", response=response, body=None)


def connection_error() -> openai.APIConnectionError:
    """What the SDK raises when no response arrives."""
    return openai.APIConnectionError(request=httpx2.Request("POST", "http://fake.invalid/v1"))


class Script:
    """A fake call that raises the scripted exceptions in order, then returns ``value``."""

    def __init__(self, outcomes: Iterable[BaseException | None], value: Any = "ok") -> None:
        self.outcomes = list(outcomes)
        self.value = value
        self.calls = 0
        self.times: list[float] = []

    async def __call__(self) -> Any:
        self.calls += 1
        self.times.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0)
        if self.outcomes:
            outcome = self.outcomes.pop(0)
            if outcome is not None:
                raise outcome
        return self.value


class FakeClock:
    """A clock that only moves when something sleeps on it (single-task tests)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def run(body: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run an async test body on a fresh loop."""
    return asyncio.run(body())


class VirtualTime:
    """A clock for many tasks at once: time moves only when every task is waiting on it, to
    the earliest wake-up asked for, so a simulated endpoint's seconds take no real time and a
    run is the same on a loaded machine as on an idle one."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._count = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        import heapq

        future = asyncio.get_running_loop().create_future()
        self._count += 1
        # A real sleep never takes less than a microsecond: a wait of 1e-16 s (a level a
        # rounding error short) would otherwise never move the clock.
        heapq.heappush(self._timers, (self.now + max(1e-6, seconds), self._count, future))
        await future

    async def drive(self, main: Coroutine[Any, Any, Any]) -> Any:
        """Run ``main``, moving time on whenever nothing else can run."""
        import heapq

        task = asyncio.ensure_future(main)
        idle = 0
        while not task.done():
            for _ in range(20):  # let every task that can run go until it waits on the clock
                await asyncio.sleep(0)
            if task.done():
                break
            if not self._timers:
                idle += 1
                if idle > 1000:
                    task.cancel()
                    raise RuntimeError("every task waits, and not on the clock: a deadlock")
                continue
            idle = 0
            when, _, future = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            if not future.cancelled():
                future.set_result(None)
        return task.result()


class SimulatedEndpoint:
    """A chat endpoint without rate-limit headers, in virtual time (``clock``): every reply
    takes ``latency``; ``scattered`` of requests are refused at random ``refused_after`` after
    they arrive, each asking for ``retry_after``; with ``rpm``, a limiter lets ``slice_s``
    seconds of its budget through at once and refuses the rest 5 ms after arrival with the
    wait until it has room, as the flowkit test server does. Counts ``ok`` and ``refused``."""

    def __init__(
        self,
        clock: VirtualTime,
        *,
        scattered: float = 0.0,
        retry_after: float = 1.0,
        refused_after: float = 0.005,
        rpm: float = 0,
        slice_s: float = 1.0,
        latency: float = 0.2,
        seed: int = 7,
    ) -> None:
        self.clock, self.rng, self.latency = clock, random.Random(seed), latency
        self.scattered, self.retry_after, self.refused_after = scattered, retry_after, refused_after
        self.rpm, self.rate = rpm, rpm / 60.0
        self.cap = max(1.0, rpm * slice_s / 60.0)
        self.level, self.stamp = self.cap, 0.0
        self.ok = self.refused = 0

    async def call(self) -> str:
        clock = self.clock
        if self.rpm:
            self.level = min(self.cap, self.level + (clock.now - self.stamp) * self.rate)
            self.stamp = clock.now
            if self.level < 1:
                self.refused += 1
                wait = (1 - self.level) / self.rate
                await clock.sleep(0.005)
                raise status_error(429, {"retry-after-ms": str(math.ceil(wait * 1000))})
            self.level -= 1
        if self.scattered and self.rng.random() < self.scattered:
            self.refused += 1
            await clock.sleep(self.refused_after)
            raise status_error(429, {"retry-after-ms": str(round(self.retry_after * 1000))})
        await clock.sleep(self.latency)
        self.ok += 1
        return "ok"
