"""The shared SDK clients: one TLS context for every client of the process."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from flowkit.llm import clients
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.testing.server import LocalServer


def test_clients_share_one_verifying_tls_context(llm_server: LocalServer) -> None:
    # Two connections to one server: two clients, each with its own pool.
    endpoints = [
        Endpoint(
            connection=name,
            kind="openai",
            model="m",
            base_url=llm_server.base_url,
            limits=Limits(max_retries=0, concurrency=concurrency),
        )
        for name, concurrency in (("a", 4), ("b", 8))
    ]
    clients.warm_up()  # as importing the module does; the clients must wait for it, not race it

    async def main() -> list[Any]:
        made = [await clients.get_client(endpoint) for endpoint in endpoints]
        for endpoint in endpoints:
            assert (await chat(endpoint, "m", [{"role": "user", "content": "hi"}], {})).text
        contexts = [client._client._transport.ssl_context for client in made]
        assert made[0] is not made[1]
        await clients.aclose_clients()
        return contexts

    first, second = asyncio.run(main())
    assert first is second is clients._tls_context()
    # Shared, not weakened: certificates and host names are still checked.
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname


def test_an_sdk_without_the_hook_lets_each_client_build_its_own(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Elsewhere:  # a transport class whose httpx cannot be found
        pass

    monkeypatch.setattr(clients, "_tls", [])  # nothing built yet in this process
    monkeypatch.setattr(clients.openai, "DefaultAioHttpClient", Elsewhere, raising=False)
    assert clients._tls_context() is None
    monkeypatch.undo()  # the real transport, which now builds its own context, as before
    monkeypatch.setattr(clients, "_tls", [None])
    endpoint = Endpoint(connection="own", kind="openai", model="m", base_url=llm_server.base_url)

    async def main() -> Any:
        client = await clients.get_client(endpoint)
        assert (await chat(endpoint, "m", [{"role": "user", "content": "hi"}], {})).text
        context = client._client._transport.ssl_context
        await clients.aclose_clients()
        return context

    context = asyncio.run(main())
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
