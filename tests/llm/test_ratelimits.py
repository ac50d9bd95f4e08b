"""The x-ratelimit-* headers in every documented format, and how a 429 is judged from them."""

from __future__ import annotations

try:  # the SDK's httpx: httpx2 from openai 3, httpx before
    import httpx2
except ImportError:
    import httpx as httpx2  # type: ignore[no-redef]
import pytest

from flowkit.llm.ratelimits import Quota, format_duration, parse_duration, parse_rate_headers
from flowkit.llm.retry import Failure, classify
from tests.llm.fakes import status_error


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),  # OpenAI docs, reset-requests
        ("6m0s", 360.0),  # OpenAI docs, reset-tokens
        ("20ms", 0.02),
        ("12ms", 0.012),
        ("0s", 0.0),
        ("1m30s", 90.0),
        ("1h2m3s", 3723.0),
        ("2m59.56s", 179.56),  # Groq, fractional seconds
        ("7.66s", 7.66),
        ("1m30.5s", 90.5),
        ("500us", 0.0005),
        ("500µs", 0.0005),
        ("250ns", 2.5e-7),
        ("2", 2.0),  # a bare number of seconds, as some gateways send
        (" 1s ", 1.0),
    ],
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "1x", "1s2", "-1s", "-1", "ms", "1 s", "abc"])
def test_malformed_durations_are_ignored(text: str) -> None:
    assert parse_duration(text) is None


def test_format_duration_round_trips() -> None:
    for seconds in (0.02, 0.5, 1.0, 1.5, 59.25, 360.0, 90.25):
        text = format_duration(seconds)
        assert parse_duration(text) == pytest.approx(seconds, abs=1e-3), text
    assert format_duration(360.0) == "6m0s"
    assert format_duration(0.02) == "20ms"


def test_openai_headers_all_six() -> None:
    found = parse_rate_headers(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-limit-tokens": "150000",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-remaining-tokens": "149984",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-reset-tokens": "6m0s",
        }
    )
    assert found is not None
    assert found.requests == Quota(60, 59, 1.0)
    assert found.tokens == Quota(150000, 149984, 360.0)
    assert not found.exhausted


def test_azure_sends_remaining_only_and_minus_one_means_unknown() -> None:
    found = parse_rate_headers(
        {"x-ratelimit-remaining-requests": "19", "x-ratelimit-remaining-tokens": "-1"}
    )
    assert found is not None
    assert found.requests == Quota(None, 19, None)
    assert found.tokens == Quota(None, None, None)  # -1 is "not reported", never "none left"
    assert not found.exhausted
    # Azure's Responses API quirk: every token header -1, which says nothing at all.
    quirk = {"x-ratelimit-limit-tokens": "-1", "x-ratelimit-remaining-tokens": "-1"}
    assert parse_rate_headers(quirk) is None


def test_usage_based_variants_and_case_insensitive_names() -> None:
    found = parse_rate_headers(
        httpx2.Headers(
            {
                "X-RateLimit-Limit-Tokens_Usage_Based": "40000",
                "x-ratelimit-remaining-tokens_usage_based": "0",
                "x-ratelimit-reset-tokens_usage_based": "20ms",
            }
        )
    )
    assert found is not None
    assert found.tokens == Quota(40000, 0, 0.02)
    assert found.exhausted
    assert parse_rate_headers({"content-type": "application/json"}) is None
    assert parse_rate_headers(None) is None


def test_a_429_is_overload_only_with_a_pause_or_a_spent_budget() -> None:
    scattered = classify(status_error(429, {"Retry-After": "0"}))
    assert scattered.kind is Failure.RATE_LIMIT and not scattered.overload
    assert not classify(status_error(429)).overload
    assert classify(status_error(429, {"retry-after-ms": "250"})).overload
    spent = classify(status_error(429, {"x-ratelimit-remaining-requests": "0"}))
    assert spent.overload and spent.retry_after is None
    assert not classify(status_error(500, {"Retry-After": "2"})).overload
