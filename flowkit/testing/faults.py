"""What can go wrong on purpose: OpenAI-shaped errors, injected faults and rate limits.

Faults are drawn from an RNG the caller seeds per attempt, so a run is reproducible however its
requests interleave. Rate limits keep sliding one-minute windows of admissions and tokens, and
answer 429 with the wait a real server would advertise.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from typing import Any

from aiohttp import web


def json_response(
    obj: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(obj).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


class ApiError(Exception):
    """An OpenAI-shaped error response, raised from anywhere inside a handler."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.headers = status, kind, code, headers or {}

    def response(self) -> web.Response:
        error = {"message": str(self), "type": self.kind, "param": None, "code": self.code}
        return json_response({"error": error}, status=self.status, headers=self.headers)


def draw(rng: random.Random, rates: dict[str, float]) -> str | None:
    """One fault kind, or None, with the configured probabilities."""
    roll = rng.random()
    for kind, rate in rates.items():
        if roll < rate:
            return kind
        roll -= rate
    return None


def injected_429(retry_after: float) -> ApiError:
    whole = f"{retry_after:.3f}".rstrip("0").rstrip(".")
    return ApiError(
        429,
        "Rate limit reached (fault injected by the flowkit test server)",
        kind="requests",
        code="rate_limit_exceeded",
        headers={"Retry-After": whole, "retry-after-ms": str(round(retry_after * 1000))},
    )


def injected_500() -> ApiError:
    return ApiError(
        500,
        "The server had an error (fault injected by the flowkit test server)",
        kind="server_error",
    )


def malformed(reply: dict[str, Any]) -> web.Response:
    """A 200 whose body is cut in half, as a proxy dropping the connection would leave it."""
    raw = json.dumps(reply).encode()
    return web.Response(body=raw[: len(raw) // 2], content_type="application/json")


def garbage(rng: random.Random) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz~#%&*"
    return " ".join(
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
        for _ in range(rng.randint(4, 12))
    )


class RateLimited(ApiError):
    """A 429 from the rpm or tpm limit (``limit`` says which), with the wait to advertise."""

    def __init__(self, wait: float, limit: str, per_minute: int) -> None:
        wait = max(wait, 0.0)
        self.limit = limit
        unit = "requests" if limit == "rpm" else "tokens"
        super().__init__(
            429,
            f"Rate limit reached for the flowkit test server: {per_minute} {unit} per minute; "
            f"retry in {wait:.2f}s",
            kind="requests",
            code="rate_limit_exceeded",
            headers={
                "Retry-After": str(math.ceil(wait)),
                "retry-after-ms": str(math.ceil(wait * 1000)),
            },
        )


class RateWindow:
    """Requests and tokens admitted over the last minute, for rpm and tpm limits."""

    def __init__(self) -> None:
        self.admitted: deque[float] = deque()  # admission times, for rpm
        self.spent: deque[tuple[float, int]] = deque()  # (time, tokens), for tpm
        self.tokens = 0

    def admit(self, now: float, tokens: int, rpm: int, tpm: int) -> None:
        """Admit one request and count its tokens, or raise ``RateLimited``."""
        window, spent = self.admitted, self.spent
        while window and window[0] <= now - 60:
            window.popleft()
        while spent and spent[0][0] <= now - 60:
            self.tokens -= spent.popleft()[1]
        if rpm and len(window) >= rpm:
            raise RateLimited(window[0] + 60 - now, "rpm", rpm)
        if tpm and spent and self.tokens + tokens > tpm:
            freed, wait = 0, 60.0
            for stamp, used in spent:
                freed += used
                if self.tokens - freed + tokens <= tpm:
                    wait = stamp + 60 - now
                    break
            raise RateLimited(wait, "tpm", tpm)
        if rpm:
            window.append(now)
        self.spend(now, tokens, tpm)

    def spend(self, now: float, tokens: int, tpm: int) -> None:
        if tpm and tokens:
            self.spent.append((now, tokens))
            self.tokens += tokens
