"""Parameter mapping and token estimates of the client layer (no HTTP)."""

from __future__ import annotations

import pytest

from flowkit.llm.charging import arrival_charge, output_cap, prompt_tokens
from flowkit.llm.client import request_params
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
    # No tiktoken encoding for a test model: 4 characters a token, 4 tokens a message.
    messages = [{"role": "user", "content": "x" * 400}, {"role": "system", "content": None}]
    assert prompt_tokens("flowkit-test", messages) == 100 + 8
    assert output_cap({"max_tokens": 50, "n": 2}) == 100
    assert output_cap({"max_completion_tokens": 30, "max_tokens": 50}) == 30
    parts = [{"role": "user", "content": [{"type": "text", "text": "y" * 40}]}]
    assert prompt_tokens("flowkit-test", parts) == 10 + 4
    # Charged on arrival: the prompt plus the cap; OpenAI's larger of the cap and chars / 4.
    assert arrival_charge("prompt_plus_max", "m", messages, {"max_tokens": 50, "n": 2}) == 208
    assert arrival_charge("max_of", "m", messages, {"max_tokens": 50}) == 100
    assert arrival_charge("max_of", "m", messages, {"max_tokens": 500}) == 500
    assert arrival_charge("usage", "m", messages, {"max_tokens": 50}) is None
    assert arrival_charge("prompt_plus_max", "m", messages, {}) is None  # no cap: by usage


def test_streaming_is_rejected() -> None:
    with pytest.raises(ValueError, match="'stream' is not supported"):
        request_params(LOCAL, "m", {"stream": True})


@pytest.mark.parametrize(
    "url", ["https://api.openai.com/v1/", "https://API.openai.com/v1", OPENAI_PUBLIC_URL]
)
def test_the_public_openai_api_however_its_url_is_written(url: str) -> None:
    # OPENAI_BASE_URL=https://api.openai.com/v1/ (a trailing slash) is OpenAI all the same:
    # its default token_charge is OpenAI's max_of, and max_tokens goes as max_completion_tokens.
    ep = Endpoint(connection="c", kind="openai", model="gpt-4o-mini", base_url=url)
    assert ep.token_charge() == "max_of"
    assert request_params(ep, "gpt-4o-mini", {"max_tokens": 5}) == {"max_completion_tokens": 5}
    local = Endpoint(connection="c", kind="openai", model="m", base_url="http://127.0.0.1:1/v1/")
    assert local.token_charge() == "prompt_plus_max"
