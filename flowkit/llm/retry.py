"""Which failures are worth another attempt, and how long to wait before it.

Classification is duck-typed on ``status_code`` and ``response.headers`` so it works for
the openai SDK's exceptions (``RateLimitError``, ``APIStatusError``…) and for anything
shaped like them, and it needs no HTTP to test.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from flowkit.llm.ratelimits import RateHeaders, parse_rate_headers
from flowkit.llm.replies import too_large_in
from flowkit.llm.sdk import openai

MAX_RETRY_AFTER = 120.0
"""A server asking for a longer pause is reporting an exhausted quota, not congestion."""


class Failure(Enum):
    """How an attempt failed, as far as retrying is concerned."""

    RATE_LIMIT = "rate_limit"
    SERVER = "server"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    MALFORMED = "malformed"
    FATAL = "fatal"


@dataclass(frozen=True)
class Verdict:
    """The classification of one failed attempt."""

    kind: Failure
    retry_after: float | None = None
    """Seconds the server asked us to wait (0 means now), or None if it did not say."""
    cause: str | None = None
    """What went wrong, in words, for connection failures and unfixable statuses."""
    unfixable: bool = False
    """No retry can help while the endpoint stays as it is (bad key, no such model, refused,
    unknown host): when every call fails like this, the run stops early."""
    rates: RateHeaders | None = None
    """The rate-limit headers the failed reply carried."""

    @property
    def overload(self) -> bool:
        """A 429 that proves the endpoint is over its limit, not a scattered fault: it asks for
        a positive pause or says a budget is spent. (Clustering is judged by the scheduler.)"""
        if self.kind is not Failure.RATE_LIMIT:
            return False
        return bool(self.retry_after) or (self.rates is not None and self.rates.exhausted)

    @property
    def retryable(self) -> bool:
        """Whether another attempt can succeed where this one failed."""
        return self.kind is not Failure.FATAL


def _headers(exc: BaseException) -> Mapping[str, str] | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if headers is not None else None


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date).

    ``Retry-After: 0`` is an instruction to retry immediately and comes back as ``0.0``;
    only a missing or unparseable header gives None.  Negative values and dates in the
    past clamp to 0.
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lower.get(name)
        if value is None:
            continue
        try:
            seconds = float(value.strip()) / scale
        except ValueError:
            continue
        if math.isnan(seconds):
            continue
        return max(0.0, seconds)
    value = lower.get("retry-after")
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when.timestamp() - now())
    return None


def connection_cause(exc: BaseException) -> tuple[str, bool]:
    """(what failed, whether retrying can fix it) for an error that got no response.

    The SDK raises one ``APIConnectionError`` for everything; the reason is down its chain of
    causes (the transport's error, then the socket error). The whole chain is searched for a
    socket error before a timeout is believed: the SDK's aiohttp transport reports a refused
    connection as a connect *timeout* whose cause is the ``ConnectionRefusedError``.
    """
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and all(node is not seen for seen in chain):
        chain.append(node)
        node = node.__cause__ or node.__context__
    for node in chain:
        if isinstance(node, socket.gaierror):
            return "DNS lookup failed (unknown host)", True
        if isinstance(node, ConnectionRefusedError):
            return "connection refused (is the server running?)", True
        if isinstance(node, ssl.SSLError | ssl.CertificateError):
            return f"TLS handshake failed ({node})", True
    for node in chain:
        if isinstance(node, TimeoutError) or "Timeout" in type(node).__name__:
            return "connection timed out", False
    return "connection failed", False


# Statuses no retry can cure while the configuration stays as it is.
_UNFIXABLE = {401: "authentication failed (401)", 403: "access denied (403)"}


QUOTA_SPENT = "quota exhausted (429 insufficient_quota): add credit or raise the limit"
"""A spent quota does not come back within a run: it stops the run, as a bad key does."""


def _spent_quota(exc: BaseException) -> bool:
    """Whether a 429 says the account's quota is spent (OpenAI's ``insufficient_quota``, as
    its error's ``code`` or ``type``) rather than that requests come too fast."""
    found = {getattr(exc, "code", None), getattr(exc, "type", None)}
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        error = inner if isinstance(inner, dict) else body
        found |= {error.get("code"), error.get("type")}
    return "insufficient_quota" in found


def _request_too_large(exc: BaseException) -> bool:
    """Whether a 429 says the request alone is over the whole token budget (OpenAI's
    "Request too large for MODEL ... on tokens per min (TPM): Limit N, Requested M"): no wait
    lets it through, so retrying it only adds rejected requests."""
    message = getattr(exc, "message", None) or str(exc)
    return "request too large" in message.lower()


def classify(exc: BaseException) -> Verdict:
    """Sort an exception into retryable kinds; everything unrecognised is fatal."""
    judged = getattr(exc, "verdict", None)
    if isinstance(judged, Verdict):  # a worker's attempt, judged where it failed (leases)
        return judged
    too_large = too_large_in(exc)
    if too_large is not None:  # the same request would get the same reply
        return Verdict(Failure.FATAL, cause=str(too_large))
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
        cause, unfixable = connection_cause(exc)
        if unfixable or not isinstance(exc, openai.APITimeoutError):
            return Verdict(Failure.CONNECTION, cause=cause, unfixable=unfixable)
        return Verdict(Failure.TIMEOUT, cause="timed out")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):  # one class from 3.11 on
        return Verdict(Failure.TIMEOUT, cause="timed out")
    if isinstance(exc, json.JSONDecodeError):
        # A 200 whose body was cut off (a proxy dropping the connection): transient.
        return Verdict(Failure.MALFORMED)
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return Verdict(Failure.FATAL)
    headers = {k.lower(): v for k, v in (_headers(exc) or {}).items()}
    retry_after = parse_retry_after(headers)
    rates = parse_rate_headers(headers)
    if retry_after is not None and retry_after > MAX_RETRY_AFTER:
        return Verdict(Failure.FATAL, retry_after, rates=rates)
    hint = headers.get("x-should-retry")
    if status in _UNFIXABLE:
        return Verdict(Failure.FATAL, retry_after, _UNFIXABLE[status], True, rates)
    if status == 404:
        return Verdict(Failure.FATAL, retry_after, "not found (404: no such model?)", True, rates)
    if hint == "false":
        return Verdict(Failure.FATAL, retry_after, rates=rates)
    if status == 429 and _spent_quota(exc):
        return Verdict(Failure.FATAL, retry_after, QUOTA_SPENT, True, rates)
    if status == 429 and _request_too_large(exc):
        return Verdict(Failure.FATAL, retry_after, rates=rates)
    if status == 429:
        return Verdict(Failure.RATE_LIMIT, retry_after, rates=rates)
    if status >= 500 or status == 408 or hint == "true":
        return Verdict(Failure.SERVER, retry_after, rates=rates)
    return Verdict(Failure.FATAL, retry_after, rates=rates)


def backoff(
    retry: int,
    *,
    base: float,
    cap: float,
    rng: Callable[[], float] = random.random,
) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**retry)].

    Full jitter (rather than a fixed or ±25 % delay) spreads a crowd of rows that failed
    together, so they do not come back together and fail again.
    """
    ceiling = min(cap, base * (2.0 ** min(retry, 60)))
    return rng() * ceiling
