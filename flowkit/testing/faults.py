"""What can go wrong on purpose: OpenAI-shaped errors, injected faults and rate limits.

Faults are drawn from an RNG the caller seeds per attempt, so a run is reproducible however its
requests interleave. Rate limits are token buckets refilled continuously (as OpenAI describes its
own), answer 429 with the wait a real server would advertise, and can report themselves in the
``x-ratelimit-*`` headers.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from aiohttp import web

from flowkit.llm.ratelimits import format_duration


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

    def __init__(self, wait: float, limit: str, per_window: int, headers: dict[str, str]) -> None:
        wait = max(wait, 0.0)
        self.limit = limit
        unit = "requests" if limit == "rpm" else "tokens"
        super().__init__(
            429,
            f"Rate limit reached for the flowkit test server: {per_window} {unit} per window; "
            f"retry in {wait:.2f}s",
            kind="requests",
            code="rate_limit_exceeded",
            headers={
                **headers,
                "Retry-After": str(math.ceil(wait)),
                "retry-after-ms": str(math.ceil(wait * 1000)),
            },
        )


class _Bucket:
    """``per_window`` units per ``window`` seconds, holding at most ``slice_s``/60 of the
    window's worth (providers enforce per-minute limits over sub-minute slices)."""

    def __init__(self, per_window: int, window: float, now: float, slice_s: float = 1.0) -> None:
        self.per_window, self.slice_s = per_window, slice_s
        self.rate = per_window / window
        self.capacity = max(1.0, per_window * min(slice_s, 60.0) / 60.0)
        self.level, self.stamp = self.capacity, now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, need: float) -> float:
        """Seconds until ``need`` fits (a need above the capacity waits for a full bucket)."""
        need = min(need, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def headers(self, unit: str) -> dict[str, str]:
        reset = (self.capacity - max(self.level, 0.0)) / self.rate
        return {
            f"x-ratelimit-limit-{unit}": str(self.per_window),
            f"x-ratelimit-remaining-{unit}": str(max(0, int(self.level))),
            f"x-ratelimit-reset-{unit}": format_duration(reset),
        }


class RateWindow:
    """Request and token budgets as token buckets refilled continuously, as OpenAI's are.

    ``window`` is the span ``rpm``/``tpm`` count over: 60 s normally, a few seconds in tests.
    The requests budget holds one second's worth of ``rpm`` (Azure evaluates request rates over
    1 or 10 s; OpenAI's guide: 60,000 requests/minute "may be enforced as 1,000 requests/second").
    The tokens budget holds ``token_slice`` seconds' worth of ``tpm`` (``ServerConfig``'s; 1 s
    by default, the strictest reading): Azure adds each request's estimate "to a running token
    count of all requests that is reset each minute" (a whole minute's burst, ``token_slice``
    60), OpenAI's limits "may be quantized" to a second.
    """

    def __init__(self, token_slice: float = 1.0) -> None:
        self.requests: _Bucket | None = None
        self.tokens: _Bucket | None = None
        self.token_slice = token_slice

    def _buckets(self, now: float, rpm: int, tpm: int, window: float) -> None:
        # A live config change (POST /config) starts a fresh budget.
        if rpm and (self.requests is None or self.requests.per_window != rpm):
            self.requests = _Bucket(rpm, window, now)
        if tpm and (
            self.tokens is None
            or self.tokens.per_window != tpm
            or self.tokens.slice_s != self.token_slice
        ):
            self.tokens = _Bucket(tpm, window, now, self.token_slice)
        if not rpm:
            self.requests = None
        if not tpm:
            self.tokens = None
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.refill(now)

    def admit(
        self, now: float, tokens: int, rpm: int, tpm: int, window: float, report: bool
    ) -> None:
        """Admit one request and charge its tokens, or raise ``RateLimited`` (with the rate
        headers when ``report``)."""
        self._buckets(now, rpm, tpm, window)
        req, tok = self.requests, self.tokens
        if tok is not None and tokens > tpm:
            # No wait lets it through: OpenAI's 429 for a request over the whole budget.
            raise ApiError(
                429,
                "Request too large for the flowkit test server on tokens per min (TPM): "
                f"Limit {tpm}, Requested {tokens}. The input or output tokens must be reduced "
                "in order to run successfully.",
                kind="tokens",
                code="rate_limit_exceeded",
                headers=self.headers() if report else {},
            )
        if req is not None and (wait := req.wait(1)) > 0:
            raise RateLimited(wait, "rpm", rpm, self.headers() if report else {})
        if tok is not None and tokens and (wait := tok.wait(tokens)) > 0:
            raise RateLimited(wait, "tpm", tpm, self.headers() if report else {})
        if req is not None:
            req.level -= 1
        if tok is not None:
            tok.level -= tokens

    def spend(self, now: float, tokens: int, tpm: int) -> None:
        """Charge tokens known only after the reply (the completion)."""
        if tpm and self.tokens is not None and tokens:
            self.tokens.refill(now)
            self.tokens.level -= tokens

    def headers(self, now: float | None = None) -> dict[str, str]:
        """The x-ratelimit-* headers for the budgets in force, in OpenAI's formats: as they
        stand at ``now`` (refilled since the last charge), as a real server reports them."""
        if now is not None:
            for bucket in (self.requests, self.tokens):
                if bucket is not None:
                    bucket.refill(now)
        found: dict[str, str] = {}
        if self.requests is not None:
            found.update(self.requests.headers("requests"))
        if self.tokens is not None:
            found.update(self.tokens.headers("tokens"))
        return found
