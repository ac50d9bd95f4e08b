"""Fakes at the asyncio level: real openai exception objects, no HTTP."""

from __future__ import annotations

import asyncio
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
