"""The shared SDK clients: one TLS context for every client of the process, and an endpoint's
first requests on httpx until aiohttp is imported."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowkit.llm import clients
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES


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
    clients.warm_up()  # as an https endpoint's client does; the clients must not race it

    async def main() -> list[Any]:
        made = [await clients.get_client(endpoint) for endpoint in endpoints]
        for endpoint in endpoints:
            assert (await chat(endpoint, "m", [{"role": "user", "content": "hi"}], {})).text
        contexts = [client._client._transport.ssl_context for client in made]
        assert made[0] is not made[1]
        await clients.aclose_clients()
        return contexts

    first, second = asyncio.run(main())
    assert first is second
    # A handshake goes through the shared context (``first`` may be its stand-in), which is
    # not weakened: certificates and host names are still checked.
    handshake = first.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.com")
    assert handshake.context is clients._tls_context()
    assert handshake.context.verify_mode == ssl.CERT_REQUIRED and handshake.context.check_hostname


def test_a_plain_http_endpoint_is_asked_without_loading_the_certificate_store(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clients, "_tls", [])  # nothing built yet in this process
    monkeypatch.setattr(clients, "_pending", [])
    monkeypatch.setattr(clients, "_warming", False)
    endpoint = Endpoint(connection="plain", kind="openai", model="m", base_url=llm_server.base_url)
    assert endpoint.url.startswith("http://")

    async def main() -> Any:
        client = await clients.get_client(endpoint)
        assert (await chat(endpoint, "m", [{"role": "user", "content": "hi"}], {})).text
        await clients.aclose_clients()
        return client._client._transport.ssl_context

    stand_in = asyncio.run(main())
    assert clients._tls == [] and not clients._warming
    # Its first TLS handshake (a redirect to https, say) builds the shared context and uses it.
    stand_in.set_alpn_protocols(["http/1.1"])
    handshake = stand_in.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.com")
    assert clients._tls == [handshake.context]
    assert handshake.context.verify_mode == ssl.CERT_REQUIRED


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


FIRST_ON_HTTPX = """
import asyncio, json, sys
import flowkit
from flowkit.llm import clients
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint

result = flowkit.run(sys.argv[1], sys.argv[2], cache_dir=sys.argv[3], runs_root=sys.argv[4])
report = {"statuses": [r["status"] for r in result.rows()], "aiohttp": "aiohttp" in sys.modules}
endpoint = Endpoint(connection="c", kind="openai", model="m", base_url=sys.argv[5])
ask = [{"role": "user", "content": "hi"}]

async def main():
    first = await clients.get_client(endpoint)
    report["first"] = clients.on_aiohttp(first)
    assert (await chat(endpoint, "m", ask, {})).text
    assert (await chat(endpoint, "m", ask, {})).text  # the second request starts the import
    report["still"] = clients.on_aiohttp(await clients.get_client(endpoint))
    clients._aiohttp_import[0].join()
    assert (await chat(endpoint, "m", ask, {})).text
    later = await clients.get_client(endpoint)
    report["later"] = clients.on_aiohttp(later)
    report["kept"] = await clients.get_client(endpoint) is later
    await clients.aclose_clients()
    report["closed"] = [first.is_closed(), later.is_closed()]

asyncio.run(main())
print(json.dumps(report))
"""


@pytest.mark.slow  # a process of its own (the test server here has imported aiohttp)
def test_an_endpoints_first_requests_go_on_httpx_until_aiohttp_is_imported(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # A one-row run sends one request: it never imports aiohttp. An endpoint asked a second
    # time starts the import on a thread, and its requests after it go through aiohttp.
    rows = tmp_path / "one.jsonl"
    rows.write_text((EXAMPLES / "qa.jsonl").read_text().splitlines()[0] + "\n")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["groundedness", str(rows), str(tmp_path / "c"), str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-c", FIRST_ON_HTTPX, *args, llm_server.base_url],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "statuses": ["ok"],
        "aiohttp": False,
        "first": False,
        "still": False,
        "later": True,
        "kept": True,
        "closed": [True, True],
    }
    assert llm_server.stats()["chat_completions"] == 4
