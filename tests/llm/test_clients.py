"""The shared SDK clients: one TLS context for every client of the process."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

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
    clients.warm_up()  # as preparing a run does; the clients must wait for it, not race it

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
