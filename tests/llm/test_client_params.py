"""Parameter mapping and token estimates of the client layer (no HTTP)."""

from __future__ import annotations

import pytest

from flowkit.llm.client import estimate_tokens, request_params
from flowkit.llm.endpoint import OPENAI_PUBLIC_URL, Endpoint

LOCAL = Endpoint(connection="l", kind="openai", model="m", base_url="http://127.0.0.1:1/v1")
PUBLIC = Endpoint(connection="o", kind="openai", model="m", base_url=OPENAI_PUBLIC_URL)
AZURE = Endpoint(
    connection="a", kind="azure", model="m", azure_endpoint="https://r", api_version="2024-06-01"
)


def test_max_tokens_mapping() -> None:
    assert request_params(LOCAL, "m", {"max_tokens": 5}) == {"max_tokens": 5}
    assert request_params(PUBLIC, "gpt-4o", {"max_tokens": 5}) == {"max_completion_tokens": 5}
    assert request_params(AZURE, "gpt-4o", {"max_tokens": 5}) == {"max_tokens": 5}
    assert request_params(AZURE, "o3-mini", {"max_tokens": 5}) == {"max_completion_tokens": 5}
    both = {"max_tokens": 5, "max_completion_tokens": 7}
    assert request_params(PUBLIC, "gpt-4o", both) == both


def test_params_pass_through_and_extra_body_is_merged() -> None:
    params = {
        "temperature": 0,
        "seed": 1,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 3,
        "stop": ["\n"],
        "top_p": 0.9,
        "response_format": {"type": "json_object"},
        "top_k": 40,
        "unset": None,
        "extra_body": {"min_p": 0.1, "seed": 2},
    }
    out = request_params(LOCAL, "m", params)
    # A server's own params (top_k) go as they are; extra_body's fields join the body and win.
    assert out == {
        **{k: v for k, v in params.items() if k not in ("unset", "extra_body")},
        "min_p": 0.1,
        "seed": 2,
    }


def test_estimate_tokens() -> None:
    messages = [{"role": "user", "content": "x" * 400}, {"role": "system", "content": None}]
    assert estimate_tokens(messages, {}) == 100 + 8
    assert estimate_tokens(messages, {"max_tokens": 50, "n": 2}) == 108 + 100
    parts = [{"role": "user", "content": [{"type": "text", "text": "y" * 40}]}]
    assert estimate_tokens(parts, {}) == 10 + 4


def test_streaming_is_rejected() -> None:
    with pytest.raises(ValueError, match="'stream' is not supported"):
        request_params(LOCAL, "m", {"stream": True})
