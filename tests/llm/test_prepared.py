"""A prepared chat request puts the same bytes on the wire as the SDK's own ``post`` (URL with
Azure's deployment path and api-version, headers, body), raises the same error types, and gives
way to ``post`` when the SDK lacks the hooks it uses. Real HTTP to the local test server."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from flowkit.llm import clients, prepared
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.testing.server import LocalServer

MESSAGES = [{"role": "user", "content": "Fact: the sky is blue. Answer: ✓ blue"}]
# Headers that differ between any two requests the SDK builds (not what is being compared).
VOLATILE = {"content-length", "x-stainless-raw-response"}


def _endpoints(server: LocalServer) -> dict[str, Endpoint]:
    root = server.base_url.removesuffix("/v1")
    limits = Limits(max_retries=0)
    return {
        "openai": Endpoint(
            connection="o",
            kind="openai",
            model="m",
            base_url=server.base_url,
            limits=limits,
            api_key="sk-local-test",
        ),
        "azure": Endpoint(
            connection="a",
            kind="azure",
            model="m",
            azure_endpoint=root,
            api_version="2024-06-01",
            deployment="judge-dep",
            api_key="sk-local-test",
            limits=limits,
        ),
    }


def _sent(endpoint: Endpoint, *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Chat once through ``endpoint`` and return what went on the wire, as the SDK sent it."""
    seen: list[Any] = []

    async def main() -> None:
        client = await clients.get_client(endpoint)
        real = client._send_request

        async def record(request: Any, **kwargs: Any) -> Any:
            seen.append(request)
            return await real(request, **kwargs)

        monkeypatch.setattr(client, "_send_request", record)
        result = await chat(
            endpoint, "m", MESSAGES, {"temperature": 0, "extra_headers": {"x-a": "1"}}
        )
        assert result.text
        await clients.aclose_clients()

    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(prepared, "FinalRequestOptions", None)
        asyncio.run(main())
    (request,) = seen
    headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in VOLATILE}
    return {"url": str(request.url), "headers": headers, "body": request.content}


@pytest.mark.parametrize("kind", ["openai", "azure"])
def test_a_prepared_request_sends_what_the_sdk_post_sends(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    endpoint = _endpoints(llm_server)[kind]
    fast = _sent(endpoint, fast=True, monkeypatch=monkeypatch)
    slow = _sent(endpoint, fast=False, monkeypatch=monkeypatch)
    assert fast == slow
    if kind == "azure":
        assert (
            "/openai/deployments/judge-dep/chat/completions?api-version=2024-06-01" in fast["url"]
        )
        assert fast["headers"]["api-key"]
    else:
        assert fast["headers"]["authorization"] == "Bearer sk-local-test"
    assert fast["headers"]["x-a"] == "1"
    assert llm_server.stats()["chat_completions"] == 2


def test_one_template_serves_every_request_of_a_shape(llm_server: LocalServer) -> None:
    endpoint = _endpoints(llm_server)["openai"]

    async def main() -> tuple[int, list[Any]]:
        replies = await asyncio.gather(
            *(chat(endpoint, "m", [{"role": "user", "content": f"q{i}"}], {}) for i in range(5))
        )
        client = await clients.get_client(endpoint)
        shapes = dict(prepared._templates[client])
        await clients.aclose_clients()
        return len(replies), list(shapes.values())

    count, templates = asyncio.run(main())
    assert count == 5 and len(templates) == 1 and templates[0] is not None
    assert llm_server.stats()["chat_completions"] == 5


def test_errors_keep_the_sdk_types(llm_server: LocalServer) -> None:
    bad_key = _endpoints(llm_server)["openai"].model_copy(update={"model": "m"})
    bad_key = Endpoint(**{**bad_key.model_dump(), "api_key": "wrong-key"})
    refused = Endpoint(
        connection="r",
        kind="openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        limits=Limits(max_retries=0),
    )

    async def ask(endpoint: Endpoint) -> Exception:
        try:
            await chat(endpoint, "m", MESSAGES, {})
        except Exception as err:  # the type is the assertion
            return err
        finally:
            await clients.aclose_clients()
        raise AssertionError("no error")

    llm_server.configure(api_key="right-key")
    try:
        assert isinstance(asyncio.run(ask(bad_key)), openai.AuthenticationError)
    finally:
        llm_server.configure(api_key=None)
    err = asyncio.run(ask(refused))
    assert isinstance(err, openai.APIConnectionError)
    assert "refused" in str(err) and "127.0.0.1:9" in str(err)
