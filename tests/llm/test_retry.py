"""Retry classification and Retry-After parsing, without HTTP."""

from __future__ import annotations

import asyncio
import email.utils
import json

import pytest

from flowkit.llm.retry import Failure, backoff, classify, parse_retry_after
from tests.llm.fakes import connection_error, status_error

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "0"}, 0.0),
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"retry-after-ms": "soon", "Retry-After": "3"}, 3.0),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": "whenever"}, None),
        ({"Retry-After": email.utils.formatdate(NOW + 7, usegmt=True)}, 7.0),
        ({"Retry-After": email.utils.formatdate(NOW - 60, usegmt=True)}, 0.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    got = parse_retry_after(headers, now=lambda: NOW)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_classify() -> None:
    assert classify(status_error(429)).kind is Failure.RATE_LIMIT
    assert classify(status_error(429, {"Retry-After": "0"})).retry_after == 0.0
    assert classify(status_error(500)).kind is Failure.SERVER
    assert classify(status_error(503)).kind is Failure.SERVER
    assert classify(status_error(408)).kind is Failure.SERVER
    assert classify(connection_error()).kind is Failure.CONNECTION
    assert classify(asyncio.TimeoutError()).kind is Failure.TIMEOUT
    assert classify(json.JSONDecodeError("cut", "{", 1)).kind is Failure.MALFORMED
    for status in (400, 401, 403, 404, 422):
        assert not classify(status_error(status)).retryable
    assert not classify(ValueError("x")).retryable
    assert not classify(status_error(503, {"x-should-retry": "false"})).retryable
    assert classify(status_error(409, {"x-should-retry": "true"})).retryable
    assert not classify(status_error(429, {"Retry-After": "3600"})).retryable


def test_backoff_is_bounded_full_jitter() -> None:
    assert backoff(0, base=0.5, cap=30, rng=lambda: 1.0) == 0.5
    assert backoff(3, base=0.5, cap=30, rng=lambda: 1.0) == 4.0
    assert backoff(10, base=0.5, cap=30, rng=lambda: 1.0) == 30.0
    assert backoff(10, base=0.5, cap=30, rng=lambda: 0.0) == 0.0
    assert backoff(10_000, base=0.5, cap=30, rng=lambda: 0.5) == 15.0
